package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemguard/idemguard/internal/testing/testenv"
)

// The statuses the demo client must see, in order.
var wantLines = []string{
	"charge ", "-> 201 ", "Idempotency-Key-Status: executed", "Location: /payments/pay_1",
	"retry ", "-> 201 ", "Idempotency-Key-Status: replayed", "Location: /payments/pay_1",
	"retry, JSON serialised anew", "-> 201 ", "Idempotency-Key-Status: replayed", "Location: /payments/pay_1",
	"same key, other body", "-> 422 ", "#key-reused",
	"same key, other account", "-> 201 ", "Idempotency-Key-Status: executed", "Location: /payments/pay_2",
	"declined", "-> 402 ", "Idempotency-Key-Status: released",
	"retry ", "-> 402 ", "Idempotency-Key-Status: released",
	"no key", "-> 400 ", "#key-missing",
	"payments created: 2\n",
}

func check(t *testing.T, out string) {
	t.Helper()
	rest := out
	for _, want := range wantLines {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("output lacks %q after what came before:\n%s", want, out)
		}
		rest = rest[i+len(want):]
	}
}

func TestMemory(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, "127.0.0.1:0", "", "", false); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	check(t, out.String())
}

func TestDynamoDB(t *testing.T) {
	endpoint := testenv.Require(t, testenv.DynamoDBEndpoint, "DynamoDB Local")
	var b [4]byte
	rand.Read(b[:])
	table := "httpapi-test-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		client := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), Credentials: localCredentials{}})
		client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, "127.0.0.1:0", endpoint, table, false); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "records in DynamoDB table "+table) {
		t.Errorf("the example did not use DynamoDB:\n%s", out.String())
	}
	check(t, out.String())
}
