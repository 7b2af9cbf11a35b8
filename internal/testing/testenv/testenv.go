// Package testenv is how idemguard's integration tests find the servers the
// harness (scripts/harness.sh) starts.
package testenv

import (
	"os"
	"testing"
)

// Names of the variables the harness exports.
const (
	DynamoDBEndpoint = "IDEMGUARD_DYNAMODB_ENDPOINT"
	TemporalAddress  = "IDEMGUARD_TEMPORAL_ADDRESS"
	// PostgresURL is a connection URL of a database the tests may create
	// tables in, e.g. postgres://idemguard@127.0.0.1:5432/idemguard?sslmode=disable.
	PostgresURL = "IDEMGUARD_POSTGRES_URL"
	// RedisAddr is the host:port of a redis-server on loopback.
	RedisAddr = "IDEMGUARD_REDIS_ADDR"
)

// Require returns the value of the environment variable name, which locates
// a server (what names it, for messages). If it is unset the test is
// skipped, or fails when CI is "true": CI must never pass by skipping.
func Require(t testing.TB, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		Missing(t, name+" is not set: no "+what+"; run the tests with scripts/harness.sh run (make test)")
	}
	return v
}

// Missing skips the test for a missing prerequisite, or fails it when CI is
// "true".
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
