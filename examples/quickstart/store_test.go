package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/logging"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// IDEMGUARD_REDIS_ADDR picks Redis even when DynamoDB's variables are set
// too (as scripts/harness.sh sets them all); nothing needs to answer at
// the address for the choice.
func TestRedisComesFirst(t *testing.T) {
	vars := map[string]string{redisAddrEnv: "127.0.0.1:1", endpointEnv: "http://127.0.0.1:1", tableEnv: "t"}
	st, err := openStore(context.Background(), func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if !strings.HasPrefix(st.desc, "Redis at 127.0.0.1:1 (IDEMGUARD_REDIS_ADDR)") {
		t.Errorf("store %q; want Redis", st.desc)
	}
}

// syncBuffer is a log sink for the SDK, which may log from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Logf(c logging.Classification, format string, v ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(&s.b, "%s "+format+"\n", append([]any{c}, v...)...)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The DynamoDB Local client that docs/dynamodb.md shows, built with
// config.LoadDefaultConfig and its logger, replays without the SDK's
// checksum warning; with checksum validation left on, every replay logs one
// (aws-sdk-go-v2 issue 3545), which shows that the test can fail.
func TestDynamoDBLocalReplaysWithoutChecksumWarnings(t *testing.T) {
	endpoint := requireEnv(t, endpointEnv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, validate := range []bool{false, true} {
		t.Run(fmt.Sprintf("validate=%v", validate), func(t *testing.T) {
			logs := &syncBuffer{}
			client, err := dynamoDBLocal(ctx, endpoint, awsconfig.WithLogger(logs))
			if err != nil {
				t.Fatal(err)
			}
			if validate {
				client = dynamodb.New(client.Options(), func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = false })
			}
			table := fmt.Sprintf("quickstart-checksum-%d-%v", time.Now().UnixNano(), validate)
			t.Cleanup(func() {
				client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
			})
			if err := idemddb.CreateTable(ctx, client, table); err != nil {
				t.Fatal(err)
			}
			s, err := idemddb.New(client, table)
			if err != nil {
				t.Fatal(err)
			}
			g, err := guard.New(s)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 { // a first call, then two replays: failed conditions
				v, out, err := adapt.Execute(ctx, g, "checksum", "order-1", func(context.Context) (int, error) { return 7, nil })
				if err != nil || v != 7 || (i > 0) != (out == guard.OutcomeReplayed) {
					t.Fatalf("call %d: %v, %v, %v", i, v, out, err)
				}
			}
			warned := strings.Contains(logs.String(), "failed to close HTTP response body, this may affect connection reuse: response did not match expected checksum")
			if warned != validate {
				t.Errorf("checksum validation %v: warned = %v, want %v; the SDK logged:\n%s", validate, warned, validate, logs.String())
			}
		})
	}
}
