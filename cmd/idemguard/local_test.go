package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/store"
)

// DynamoDB Local without -sharedDb (the harness runs it so) keeps one
// database per access key and region. An application that signs with its
// own credentials and region writes to its database; the CLI, given the
// same through the SDK's usual environment, reads that database, not the
// one of its fixed fallback credentials.
func TestDynamoDBLocalUsesTheCredentialChain(t *testing.T) {
	client := dynamodbtest.NewClient(t, func(o *dynamodb.Options) {
		o.Region = "eu-west-1"
		o.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "appkey", SecretAccessKey: "appsecret", Source: "test"}, nil
		})
	})
	s := dynamodbtest.NewStore(t, client)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now()
	rec := &store.Record{Key: "charge#app", Status: store.StatusInProgress, Token: "t-app",
		ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
	if _, err := s.Acquire(ctx, rec, now); err != nil {
		t.Fatal(err)
	}
	u := "dynamodb://" + s.Table() + "?endpoint=" + url.QueryEscape(dynamodbtest.Endpoint(t))
	env := []string{StoreEnv + "=" + u, "AWS_ACCESS_KEY_ID=appkey", "AWS_SECRET_ACCESS_KEY=appsecret", "AWS_REGION=eu-west-1"}
	r := cli(t, env, "", "get", rec.Key)
	if r.code != exitOK || !strings.Contains(r.stdout, "t-app") {
		t.Errorf("get with the application's credentials: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// Without credentials in the environment the CLI falls back to fixed
	// ones, and so to another database, where the table does not exist;
	// the message says which database it looked in.
	r = cli(t, []string{StoreEnv + "=" + u}, "", "get", rec.Key)
	if r.code != exitError || !strings.Contains(r.stderr, "does not exist") || !strings.Contains(r.stderr, "access key local, region us-east-1") {
		t.Errorf("get with the fallback credentials: exit %d, stderr %q; want 2, the table missing in the database of access key local, region us-east-1", r.code, r.stderr)
	}
}
