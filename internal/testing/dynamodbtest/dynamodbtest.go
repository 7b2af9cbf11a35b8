// Package dynamodbtest connects tests to DynamoDB Local: a client from the
// environment, a fresh table per test, and a middleware that counts the
// requests a client sends.
//
// Tests that need the server call [NewClient], which reads the endpoint from
// the environment variable IDEMGUARD_DYNAMODB_ENDPOINT (for example
// http://127.0.0.1:8000). When it is unset the test is skipped, or fails if
// CI=true, so that a CI run without the server cannot pass silently. The
// repository's scripts/harness.sh starts DynamoDB Local and sets the
// variable:
//
//	IDEMGUARD_SERVICES=dynamodb scripts/harness.sh run go test ./store/dynamodb/...
package dynamodbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/internal/testing/testenv"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// EndpointEnv is the environment variable that holds the DynamoDB Local
// endpoint URL.
const EndpointEnv = testenv.DynamoDBEndpoint

// Endpoint returns the DynamoDB Local endpoint from [EndpointEnv]. If it is
// unset, Endpoint skips the test, or fails it when the environment variable
// CI is "true".
func Endpoint(t testing.TB) string {
	t.Helper()
	return testenv.Require(t, EndpointEnv, "DynamoDB Local")
}

// Options returns client options for DynamoDB Local at endpoint: region
// us-east-1 and static credentials "local"/"local", which DynamoDB Local
// accepts.
func Options(endpoint string) dynamodb.Options {
	return dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "dynamodbtest"}, nil
		}),
	}
}

// NewClient returns a client for DynamoDB Local (see [Endpoint] and
// [Options]), adjusted by optFns, for example [CountRequests].
func NewClient(t testing.TB, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	return dynamodb.New(Options(Endpoint(t)), optFns...)
}

var invalidTableChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// TableName returns a table name unique to this call, derived from the
// test's name.
func TableName(t testing.TB) string {
	name := invalidTableChars.ReplaceAllString(t.Name(), "-")
	if len(name) > 180 {
		name = name[len(name)-180:]
	}
	var b [6]byte
	rand.Read(b[:])
	return "idemguard-" + name + "-" + hex.EncodeToString(b[:])
}

// NewTable creates a fresh table with [idemddb.CreateTable] and the given
// options, registers its deletion with t.Cleanup, and returns its name. A
// server that cannot enable TTL is logged, not fatal. Pass
// the same options to [idemddb.New].
func NewTable(t testing.TB, client *dynamodb.Client, opts ...idemddb.Option) string {
	t.Helper()
	table := TableName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := idemddb.CreateTable(ctx, client, table, opts...)
	switch {
	case errors.Is(err, idemddb.ErrTTLNotEnabled):
		// An emulator without TTL: the store does not need it.
		t.Logf("CreateTable: %v", err)
	case err != nil:
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
			t.Errorf("DeleteTable(%s): %v", table, err)
		}
	})
	return table
}

// NewStore returns a store on a fresh table (see [NewTable]) with opts.
func NewStore(t testing.TB, client *dynamodb.Client, opts ...idemddb.Option) *idemddb.Store {
	t.Helper()
	s, err := idemddb.New(client, NewTable(t, client, opts...), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// CountRequests installs a request-counting middleware in the client options
// o and returns its counter: one round trip per HTTP request, named by its
// operation ("PutItem", "GetItem", …). Retried attempts count once each.
// Use it as a client option:
//
//	var n *reqcount.Counter
//	client := dynamodbtest.NewClient(t, func(o *dynamodb.Options) { n = dynamodbtest.CountRequests(o) })
func CountRequests(o *dynamodb.Options) *reqcount.Counter {
	c := &reqcount.Counter{}
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		// After the retry middleware, so that each attempt passes through.
		return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("idemguardCountRequests",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				c.Trip(awsmiddleware.GetOperationName(ctx))
				return next.HandleFinalize(ctx, in)
			}), middleware.After)
	})
	return c
}
