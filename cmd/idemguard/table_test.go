package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/postgres"
)

// create-table on DynamoDB makes the table the URL's options describe,
// with TTL on the expiry attribute, and a store on it works.
func TestCreateTableDynamoDB(t *testing.T) {
	client := dynamodbtest.NewClient(t)
	table := dynamodbtest.TableName(t)
	t.Cleanup(func() {
		client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	u := fmt.Sprintf("dynamodb://%s?endpoint=%s&key-attr=pk&sort-key=sk&partition-value=idempotency%%23ops&expiry-attr=ttl",
		table, url.QueryEscape(dynamodbtest.Endpoint(t)))
	r := cli(t, nil, "", "create-table", "--store", u).want(t, exitOK)
	if !strings.Contains(r.stdout, "is ready") {
		t.Errorf("create-table printed %q", r.stdout)
	}
	ctx := context.Background()
	d, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Table.KeySchema) != 2 {
		t.Errorf("key schema %+v, want pk and sk", d.Table.KeySchema)
	}
	ttl, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil || aws.ToString(ttl.TimeToLiveDescription.AttributeName) != "ttl" || ttl.TimeToLiveDescription.TimeToLiveStatus != types.TimeToLiveStatusEnabled {
		t.Errorf("TTL = %+v, %v; want enabled on ttl", ttl, err)
	}
	s, err := idemddb.New(client, table, idemddb.WithAttributes(idemddb.Attributes{Key: "pk"}), idemddb.WithSortKey("sk", "idempotency#ops"), idemddb.WithAttributes(idemddb.Attributes{Expiry: "ttl"}))
	if err != nil {
		t.Fatal(err)
	}
	rec := &store.Record{Key: "s#1", Status: store.StatusInProgress, Token: "t", ExpiresAt: time.Now().Add(time.Hour)}
	if _, err := s.Acquire(ctx, rec, time.Now()); err != nil {
		t.Errorf("Acquire on the new table = %v", err)
	}
	cli(t, nil, "", "get", "s#1", "--store", u).want(t, exitOK)
	// Again: the table exists with the same schema, which is fine.
	cli(t, nil, "", "create-table", "--store", u).want(t, exitOK)
	// --print is PostgreSQL's.
	cli(t, nil, "", "create-table", "--print", "--store", u).want(t, exitError)
}

func TestCreateTablePostgres(t *testing.T) {
	pool := postgrestest.NewPool(t)
	table := postgrestest.TableName(t)
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+`"`) })
	u := postgresURL(t, table)

	// --print needs no server: the statements create-table runs.
	r := cli(t, nil, "", "create-table", "--print", "--store", "postgres://nobody@127.0.0.1:1/db?table="+table).want(t, exitOK)
	if ddl, _ := postgres.DDL(table); r.stdout != ddl+"\n" {
		t.Errorf("--print = %q, want postgres.DDL %q", r.stdout, ddl)
	}
	cli(t, nil, "", "create-table", "--store", u).want(t, exitOK)
	s, err := postgres.New(pool, postgres.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec := &store.Record{Key: "s#1", Status: store.StatusInProgress, Token: "t", ExpiresAt: time.Now().Add(time.Hour)}
	if _, err := s.Acquire(ctx, rec, time.Now()); err != nil {
		t.Errorf("Acquire on the new table = %v", err)
	}
	cli(t, nil, "", "create-table", "--store", u).want(t, exitOK)
}

func TestCreateTableRedis(t *testing.T) {
	r := cli(t, nil, "", "create-table", "--store", "redis://"+redistest.Addr(t)+"?prefix=x%3A").want(t, exitOK)
	if !strings.HasPrefix(r.stdout, `nothing to create: Redis keeps each record as a hash under the prefix "x:"`) {
		t.Errorf("create-table on Redis printed %q", r.stdout)
	}
}

// An item list cannot read is reported on standard error and skipped; the
// records around it are listed, and get says what to do about it.
func TestListCorruptItem(t *testing.T) {
	client := dynamodbtest.NewClient(t)
	s := dynamodbtest.NewStore(t, client)
	u := "dynamodb://" + s.Table() + "?endpoint=" + url.QueryEscape(dynamodbtest.Endpoint(t))
	ctx := context.Background()
	for _, k := range []string{"s#1", "s#2"} {
		if _, err := s.Acquire(ctx, &store.Record{Key: k, Status: store.StatusInProgress, Token: "t", ExpiresAt: time.Now().Add(time.Hour)}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: map[string]types.AttributeValue{
		"id": &types.AttributeValueMemberS{Value: "s#bad"}, "status": &types.AttributeValueMemberS{Value: "WEIRD"},
	}}); err != nil {
		t.Fatal(err)
	}
	r := cli(t, nil, "", "list", "--json", "--store", u).want(t, exitOK)
	if n := strings.Count(r.stdout, "\n"); n != 2 || !strings.Contains(r.stderr, "warning") || !strings.Contains(r.stderr, "s#bad") {
		t.Errorf("list with a corrupt item: %d records, stderr %q; want 2 and a warning naming s#bad", n, r.stderr)
	}
	r = cli(t, nil, "", "get", "s#bad", "--store", u).want(t, exitError)
	if !strings.Contains(r.stderr, "release --force") {
		t.Errorf("get of a corrupt item: %q; want the hint to delete it", r.stderr)
	}
	// Without --force release does not touch it; with it, the item goes.
	cli(t, nil, "", "release", "s#bad", "--store", u).want(t, exitError)
	r = cli(t, nil, "", "release", "s#bad", "--force", "--store", u).want(t, exitOK)
	if !strings.Contains(r.stdout, "cannot be read as a record") || !strings.Contains(r.stdout, "deleted (--force): the unreadable item s#bad") {
		t.Errorf("release --force of a corrupt item printed %q", r.stdout)
	}
	cli(t, nil, "", "get", "s#bad", "--store", u).want(t, exitNotFound)
}

// A record written by a newer release than the command's: list warns and
// lists the others, get and release (even --force) refuse it and say to
// use the newer command; nothing is deleted.
func TestNewerFormatItem(t *testing.T) {
	client := dynamodbtest.NewClient(t)
	s := dynamodbtest.NewStore(t, client)
	u := "dynamodb://" + s.Table() + "?endpoint=" + url.QueryEscape(dynamodbtest.Endpoint(t))
	ctx := context.Background()
	if _, err := s.Acquire(ctx, &store.Record{Key: "s#1", Status: store.StatusInProgress, Token: "t", ExpiresAt: time.Now().Add(time.Hour)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: map[string]types.AttributeValue{
		"id": &types.AttributeValueMemberS{Value: "s#new"}, "status": &types.AttributeValueMemberS{Value: "SETTLED"},
		"expiration": &types.AttributeValueMemberN{Value: fmt.Sprint(time.Now().Add(time.Hour).Unix())},
		"format":     &types.AttributeValueMemberN{Value: fmt.Sprint(store.FormatVersion + 1)},
	}}); err != nil {
		t.Fatal(err)
	}
	r := cli(t, nil, "", "list", "--json", "--store", u).want(t, exitOK)
	if n := strings.Count(r.stdout, "\n"); n != 1 || !strings.Contains(r.stderr, "s#new") || !strings.Contains(r.stderr, "newer release") {
		t.Errorf("list with a newer item: %d records, stderr %q; want 1 and a warning naming s#new and the newer release", n, r.stderr)
	}
	for _, args := range [][]string{{"get", "s#new"}, {"release", "s#new"}, {"release", "s#new", "--force"}} {
		r = cli(t, nil, "", append(args, "--store", u)...).want(t, exitError)
		if !strings.Contains(r.stderr, "idemguard command of that release") {
			t.Errorf("%v of a newer item: %q; want the hint to use the newer command", args, r.stderr)
		}
	}
	if _, err := s.Get(ctx, "s#new"); !errors.Is(err, store.ErrNewerFormat) {
		t.Errorf("after release --force, Get = %v; want the newer item still there", err)
	}
}
