package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/memory"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// Environment variables that choose DynamoDB or Redis (see the package
// documentation).
const (
	endpointEnv  = "IDEMGUARD_DYNAMODB_ENDPOINT"
	tableEnv     = "IDEMGUARD_DYNAMODB_TABLE"
	redisAddrEnv = "IDEMGUARD_REDIS_ADDR"
)

const defaultTable = "idemguard-quickstart"

type storeChoice struct {
	desc  string
	store store.Store
	close func() // releases the store's client, if it has one
}

// openStore returns the memory store, or a Redis or DynamoDB store when
// the environment asks for one (Redis first), creating the DynamoDB table
// if needed.
func openStore(ctx context.Context, getenv func(string) string) (*storeChoice, error) {
	if addr := getenv(redisAddrEnv); addr != "" {
		client := goredis.NewClient(&goredis.Options{Addr: addr})
		s, err := idemredis.New(client)
		if err != nil {
			client.Close()
			return nil, err
		}
		return &storeChoice{
			desc:  fmt.Sprintf("Redis at %s (%s), keys under %q", addr, redisAddrEnv, s.Prefix()),
			store: s,
			close: func() { client.Close() },
		}, nil
	}
	endpoint := getenv(endpointEnv)
	table := getenv(tableEnv)
	sdkEndpoint := getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" || getenv("AWS_ENDPOINT_URL") != ""
	if endpoint == "" && table == "" && !sdkEndpoint {
		return &storeChoice{desc: "memory (in this process)", store: memory.New(), close: func() {}}, nil
	}
	if table == "" {
		table = defaultTable
	}

	var client *dynamodb.Client
	var where string
	if endpoint != "" {
		var err error
		if client, err = dynamoDBLocal(ctx, endpoint); err != nil {
			return nil, err
		}
		where = endpoint + " (" + endpointEnv + ")"
	} else {
		cfg, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("loading the AWS configuration: %w", err)
		}
		if cfg.Region == "" {
			cfg.Region = "us-east-1"
		}
		client = dynamodb.NewFromConfig(cfg)
		where = "the endpoint of the AWS configuration, region " + cfg.Region
	}

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := idemddb.CreateTable(cctx, client, table); err != nil && !errors.Is(err, idemddb.ErrTTLNotEnabled) {
		return nil, fmt.Errorf("creating table %s: %w", table, err)
	}
	s, err := idemddb.New(client, table)
	if err != nil {
		return nil, err
	}
	return &storeChoice{desc: fmt.Sprintf("DynamoDB table %s at %s", table, where), store: s, close: func() {}}, nil
}

// dynamoDBLocal returns a client for DynamoDB Local at endpoint, made the
// way docs/dynamodb.md shows for an application's own client: from
// config.LoadDefaultConfig (opts added), with any region and static
// credentials (DynamoDB Local accepts any, and the SDK's credential chain
// then tries nothing, the EC2 metadata endpoint included), the endpoint,
// and response checksum validation off. DynamoDB Local sends error
// responses without the CRC32 header that the SDK checks (aws-sdk-go-v2
// issue 3545), and every replay is an error response, a failed condition:
// with validation on, each one logs "failed to close HTTP response body".
func dynamoDBLocal(ctx context.Context, endpoint string, opts ...func(*awsconfig.LoadOptions) error) (*dynamodb.Client, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, append([]func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion("us-east-1"),
		awsconfig.WithCredentialsProvider(aws.NewCredentialsCache(staticCredentials{})),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.DisableValidateResponseChecksum = true
	}), nil
}

// staticCredentials are what DynamoDB Local is given: it accepts any.
type staticCredentials struct{}

func (staticCredentials) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "quickstart"}, nil
}
