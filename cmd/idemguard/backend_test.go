package main

import (
	"context"
	"strings"
	"testing"
)

func TestParseStoreURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want func(p *parsedURL) bool
	}{
		{"dynamodb://idempotency", func(p *parsedURL) bool {
			return p.kind == "dynamodb" && p.table == "idempotency" && p.endpoint == "" && len(p.ddbOpts) == 0
		}},
		{"dynamodb://Idem.Table-1?region=eu-west-1&profile=ops", func(p *parsedURL) bool {
			return p.table == "Idem.Table-1" && p.region == "eu-west-1" && p.profile == "ops"
		}},
		{"dynamodb://t?endpoint=http%3A%2F%2F127.0.0.1%3A8000&key-attr=pk&sort-key=sk&partition-value=idempotency%23orders&token-attr=fence", func(p *parsedURL) bool {
			return p.endpoint == "http://127.0.0.1:8000" && len(p.ddbOpts) == 3
		}},
		{"redis://127.0.0.1:6379/2?prefix=app%3A&dial_timeout=3s", func(p *parsedURL) bool {
			return p.kind == "redis" && p.hasPrefix && p.prefix == "app:" && !strings.Contains(p.redisURL, "prefix") && strings.Contains(p.redisURL, "dial_timeout=3s")
		}},
		{"redis://127.0.0.1:6379?prefix=", func(p *parsedURL) bool { return p.hasPrefix && p.prefix == "" }},
		{"redis://127.0.0.1:6379", func(p *parsedURL) bool { return !p.hasPrefix }},
		{"rediss+cluster://u:p@10.0.0.1:7000?addr=10.0.0.2:7000", func(p *parsedURL) bool {
			return p.cluster && strings.HasPrefix(p.redisURL, "rediss://")
		}},
		{"postgres://u@127.0.0.1:5432/db?sslmode=disable&table=ops.idem", func(p *parsedURL) bool {
			return p.kind == "postgres" && p.table == "ops.idem" && !strings.Contains(p.pgURL, "table=") && strings.Contains(p.pgURL, "sslmode=disable")
		}},
		{"postgresql://u@h/db", func(p *parsedURL) bool { return p.table == "idempotency" }},
	} {
		p, err := parseStoreURL(tc.url)
		if err != nil {
			t.Errorf("parseStoreURL(%q) = %v", tc.url, err)
			continue
		}
		if !tc.want(p) {
			t.Errorf("parseStoreURL(%q) = %+v", tc.url, p)
		}
	}
}

func TestParseStoreURLErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"idempotency", "no scheme"},
		{"mysql://h/db", `unknown scheme "mysql"`},
		{"dynamodb://", "no table"},
		{"dynamodb://t/extra", "table name as the host"},
		{"dynamodb://t?regoin=eu-west-1", "unknown dynamodb parameter regoin"},
		{"dynamodb://t?sort-key=sk", "sort-key and partition-value go together"},
		{"dynamodb://t?key-attr=a&token-attr=a", "both name attribute"},
		{"dynamodb://t?status-attr=", "status-attr is empty"},
		{"dynamodb://t?endpoint=127.0.0.1:8000", "not an http(s) URL"},
		{"redis://h:6379?prefx=a", "unexpected option: prefx"},
		{"postgres://u@h/db?table=", `table ""`},
		{"postgres://u@h:notaport/db", "invalid"},
	} {
		_, err := parseStoreURL(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseStoreURL(%q) = %v, want an error with %q", tc.url, err, tc.want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for ep, want := range map[string]bool{
		"http://127.0.0.1:8000":                       true,
		"http://localhost:8000":                       true,
		"http://[::1]:8000":                           true,
		"http://127.8.9.1":                            true,
		"https://dynamodb.eu-west-1.example.com":      false,
		"http://10.0.0.5:8000":                        false,
		"http://dynamodb-local.internal.example:8000": false,
	} {
		if got := isLoopback(ep); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", ep, got, want)
		}
	}
}

// Without a region anywhere, a DynamoDB URL that is not DynamoDB Local says
// how to give one, before sending anything.
func TestDynamoDBNeedsRegion(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_PROFILE", "")
	_, err := openStore(context.Background(), "dynamodb://t", nil)
	if err == nil || !strings.Contains(err.Error(), "?region=") {
		t.Errorf("openStore without a region = %v; want an error naming ?region=", err)
	}
	// DynamoDB Local needs none.
	b, err := openStore(context.Background(), "dynamodb://t?endpoint=http://127.0.0.1:1", nil)
	if err != nil {
		t.Fatalf("openStore for DynamoDB Local = %v", err)
	}
	if !b.ddb.Options().DisableValidateResponseChecksum || b.ddb.Options().Region != "us-east-1" {
		t.Errorf("DynamoDB Local client: checksum validation off = %v, region %q; want true, us-east-1",
			b.ddb.Options().DisableValidateResponseChecksum, b.ddb.Options().Region)
	}
}
