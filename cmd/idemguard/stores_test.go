package main

import (
	"net/url"
	"testing"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

// e2eStore is a store the CLI and the test share: the test writes through
// s, the CLI reaches the same records through url.
type e2eStore struct {
	s   store.Store
	url string
}

func dynamoStore(t *testing.T) e2eStore {
	client := dynamodbtest.NewClient(t)
	s := dynamodbtest.NewStore(t, client)
	return e2eStore{s, "dynamodb://" + s.Table() + "?endpoint=" + url.QueryEscape(dynamodbtest.Endpoint(t))}
}

func redisStore(t *testing.T) e2eStore {
	client := redistest.NewClient(t)
	s := redistest.NewStore(t, client)
	return e2eStore{s, "redis://" + redistest.Addr(t) + "/0?prefix=" + url.QueryEscape(s.Prefix())}
}

func postgresStore(t *testing.T) e2eStore {
	pool := postgrestest.NewPool(t)
	table := postgrestest.NewTable(t, pool, "")
	s, err := postgres.New(pool, postgres.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	return e2eStore{s, postgresURL(t, table)}
}

// postgresURL is the test server's URL with ?table=table for the CLI.
func postgresURL(t *testing.T, table string) string {
	u, err := url.Parse(postgrestest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("table", table)
	u.RawQuery = q.Encode()
	return u.String()
}

var e2eStores = []struct {
	name string
	open func(t *testing.T) e2eStore
}{
	{"dynamodb", dynamoStore},
	{"redis", redisStore},
	{"postgres", postgresStore},
}
