package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/memory"
)

// Environment variables that choose DynamoDB (see the package
// documentation).
const (
	endpointEnv = "IDEMGUARD_DYNAMODB_ENDPOINT"
	tableEnv    = "IDEMGUARD_DYNAMODB_TABLE"
)

const defaultTable = "idemguard-quickstart"

type storeChoice struct {
	desc  string
	store store.Store
}

// openStore returns the memory store, or a DynamoDB store when the
// environment asks for one, creating its table if needed.
func openStore(ctx context.Context, getenv func(string) string) (*storeChoice, error) {
	endpoint := getenv(endpointEnv)
	table := getenv(tableEnv)
	sdkEndpoint := getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" || getenv("AWS_ENDPOINT_URL") != ""
	if endpoint == "" && table == "" && !sdkEndpoint {
		return &storeChoice{desc: "memory (in this process)", store: memory.New()}, nil
	}
	if table == "" {
		table = defaultTable
	}

	var client *dynamodb.Client
	var where string
	if endpoint != "" {
		// DynamoDB Local: any region and credentials will do. The SDK's
		// credential chain is not consulted, so that nothing tries the EC2
		// metadata endpoint.
		client = dynamodb.New(dynamodb.Options{
			Region:       "us-east-1",
			BaseEndpoint: aws.String(endpoint),
			Credentials:  aws.NewCredentialsCache(staticCredentials{}),
		})
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
	return &storeChoice{desc: fmt.Sprintf("DynamoDB table %s at %s", table, where), store: s}, nil
}

type staticCredentials struct{}

func (staticCredentials) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "quickstart"}, nil
}
