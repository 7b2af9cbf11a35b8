package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/postgres"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// backend is an opened store and what create-table needs of it.
type backend struct {
	store store.Store
	kind  string // "dynamodb", "redis" or "postgres"
	desc  string // for messages: "DynamoDB table idempotency"
	close func()

	ddb     *dynamodb.Client // dynamodb
	table   string           // dynamodb, postgres
	ddbOpts []idemddb.Option // dynamodb
	pg      *pgxpool.Pool    // postgres
	prefix  string           // redis
}

func (b *backend) Close() {
	if b.close != nil {
		b.close()
	}
}

// The query parameters of a dynamodb:// URL that name attributes, and the
// options they set.
var ddbAttrParams = map[string]func(string) idemddb.Option{
	"key-attr":         func(n string) idemddb.Option { return idemddb.WithAttributes(idemddb.Attributes{Key: n}) },
	"expiry-attr":      func(n string) idemddb.Option { return idemddb.WithAttributes(idemddb.Attributes{Expiry: n}) },
	"lease-attr":       func(n string) idemddb.Option { return idemddb.WithAttributes(idemddb.Attributes{Lease: n}) },
	"status-attr":      func(n string) idemddb.Option { return idemddb.WithAttributes(idemddb.Attributes{Status: n}) },
	"data-attr":        func(n string) idemddb.Option { return idemddb.WithAttributes(idemddb.Attributes{Data: n}) },
	"validation-attr":  func(n string) idemddb.Option { return idemddb.WithAttributes(idemddb.Attributes{Validation: n}) },
	"token-attr":       func(n string) idemddb.Option { return idemddb.WithAttributes(idemddb.Attributes{Token: n}) },
	"result-kind-attr": func(n string) idemddb.Option { return idemddb.WithAttributes(idemddb.Attributes{ResultKind: n}) },
	"encoding-attr":    func(n string) idemddb.Option { return idemddb.WithAttributes(idemddb.Attributes{Encoding: n}) },
}

// parsedURL is a store URL taken apart, before anything is opened.
type parsedURL struct {
	kind string
	u    *url.URL
	// dynamodb
	table, region, endpoint, profile string
	ddbOpts                          []idemddb.Option
	// redis: the URL for go-redis without our parameters, and the prefix
	redisURL  string
	cluster   bool
	prefix    string
	hasPrefix bool
	// postgres: the connection string without our parameters
	pgURL string
}

// parseStoreURL checks a store URL without opening anything.
func parseStoreURL(raw string) (*parsedURL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid store URL: %w", err)
	}
	p := &parsedURL{u: u}
	q := u.Query()
	switch u.Scheme {
	case "dynamodb":
		p.kind = "dynamodb"
		p.table = u.Host
		if p.table == "" {
			p.table = strings.TrimPrefix(u.Path, "/")
		} else if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("invalid store URL %q: write dynamodb://TABLE, with the table name as the host", raw)
		}
		if p.table == "" {
			return nil, fmt.Errorf("invalid store URL %q: no table; write dynamodb://TABLE", raw)
		}
		var sortKey, partition string
		var unknown []string
		for k, vs := range q {
			v := vs[len(vs)-1]
			switch k {
			case "region":
				p.region = v
			case "endpoint":
				p.endpoint = v
			case "profile":
				p.profile = v
			case "sort-key":
				sortKey = v
			case "partition-value":
				partition = v
			default:
				if opt, ok := ddbAttrParams[k]; ok {
					if v == "" {
						return nil, fmt.Errorf("invalid store URL: dynamodb parameter %s is empty; give the attribute's name, or leave the parameter out for its default", k)
					}
					p.ddbOpts = append(p.ddbOpts, opt(v))
					continue
				}
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			known := []string{"region", "endpoint", "profile", "sort-key", "partition-value"}
			for k := range ddbAttrParams {
				known = append(known, k)
			}
			sort.Strings(unknown)
			sort.Strings(known)
			return nil, fmt.Errorf("invalid store URL: unknown dynamodb parameter %s; known: %s", strings.Join(unknown, ", "), strings.Join(known, ", "))
		}
		if (sortKey == "") != (partition == "") {
			return nil, errors.New("invalid store URL: sort-key and partition-value go together (the table's sort key attribute and the static partition value, as in idemddb.WithSortKey)")
		}
		if sortKey != "" {
			p.ddbOpts = append(p.ddbOpts, idemddb.WithSortKey(sortKey, partition))
		}
		if p.endpoint != "" {
			if e, err := url.Parse(p.endpoint); err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
				return nil, fmt.Errorf("invalid store URL: endpoint %q is not an http(s) URL", p.endpoint)
			}
		}
		// Check the options now, so that a bad name is a usage error.
		if _, err := idemddb.New(noClient{}, p.table, p.ddbOpts...); err != nil {
			return nil, fmt.Errorf("invalid store URL: %w", err)
		}
	case "redis", "rediss", "unix", "redis+cluster", "rediss+cluster":
		p.kind = "redis"
		if q.Has("prefix") {
			p.prefix, p.hasPrefix = q.Get("prefix"), true
			q.Del("prefix")
		}
		v := *u
		v.RawQuery = q.Encode()
		if s, ok := strings.CutSuffix(u.Scheme, "+cluster"); ok {
			p.cluster = true
			v.Scheme = s
		}
		p.redisURL = v.String()
		var perr error
		if p.cluster {
			_, perr = goredis.ParseClusterURL(p.redisURL)
		} else {
			_, perr = goredis.ParseURL(p.redisURL)
		}
		if perr != nil {
			return nil, fmt.Errorf("invalid store URL: %w (idemguard's own parameter: prefix)", perr)
		}
	case "postgres", "postgresql":
		p.kind = "postgres"
		p.table = "idempotency" // the store's default table (postgres.WithTable)
		if q.Has("table") {
			p.table = q.Get("table")
			q.Del("table")
		}
		v := *u
		v.RawQuery = q.Encode()
		p.pgURL = v.String()
		if _, err := pgxpool.ParseConfig(p.pgURL); err != nil {
			return nil, fmt.Errorf("invalid store URL: %w", err)
		}
		if _, err := postgres.DDL(p.table); err != nil {
			return nil, fmt.Errorf("invalid store URL: table %q: %w", p.table, err)
		}
	case "":
		return nil, fmt.Errorf("invalid store URL %q: no scheme; write dynamodb://TABLE, redis://HOST:PORT or postgres://…", raw)
	default:
		return nil, fmt.Errorf("invalid store URL: unknown scheme %q; idemguard knows dynamodb://, redis://, rediss://, unix://, redis+cluster://, postgres:// and postgresql://", u.Scheme)
	}
	return p, nil
}

// noClient is a DynamoDB client that is never called: parseStoreURL makes
// a store with it only to check the options.
type noClient struct{ idemddb.API }

// openStore opens the store raw names. Log lines of the store (Redis's
// warnings about its configuration) go to logTo.
func openStore(ctx context.Context, raw string, logTo io.Writer) (*backend, error) {
	p, err := parseStoreURL(raw)
	if err != nil {
		return nil, err
	}
	switch p.kind {
	case "dynamodb":
		return openDynamoDB(ctx, p)
	case "redis":
		return openRedis(ctx, p, logTo)
	default:
		return openPostgres(ctx, p)
	}
}

// isLoopback reports whether endpoint's host is on this machine, which is
// where DynamoDB Local runs.
func isLoopback(endpoint string) bool {
	e, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	h := e.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// localCredentials are the CLI's fallback for DynamoDB Local when the
// SDK's credential chain yields none: DynamoDB Local accepts any.
type localCredentials struct{}

func (localCredentials) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "idemguard"}, nil
}

// localCredentialTimeout bounds the look for credentials for DynamoDB
// Local.
const localCredentialTimeout = 5 * time.Second

func openDynamoDB(ctx context.Context, p *parsedURL) (*backend, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if p.region != "" {
		opts = append(opts, awsconfig.WithRegion(p.region))
	}
	if p.profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(p.profile))
	}
	local := p.endpoint != "" && isLoopback(p.endpoint)
	if local {
		// DynamoDB Local is on this machine: nothing should ask the EC2
		// metadata endpoint for credentials.
		opts = append(opts, awsconfig.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	localDB := ""
	if local {
		// DynamoDB Local started without -sharedDb (its default) keeps one
		// database per access key and region: sign as the application
		// does, with the SDK's credential chain and region, and fall back
		// to fixed ones only when the chain yields none.
		if cfg.Region == "" {
			cfg.Region = "us-east-1"
		}
		key := ""
		if cfg.Credentials != nil {
			cctx, cancel := context.WithTimeout(ctx, localCredentialTimeout)
			c, err := cfg.Credentials.Retrieve(cctx)
			cancel()
			if err == nil {
				key = c.AccessKeyID
			}
		}
		if key == "" {
			cfg.Credentials = aws.NewCredentialsCache(localCredentials{})
			key = "local"
		}
		localDB = fmt.Sprintf(" (DynamoDB Local: the database of access key %s, region %s)", key, cfg.Region)
	}
	if cfg.Region == "" {
		return nil, errors.New("no AWS region: add ?region=REGION to the store URL, or set AWS_REGION")
	}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if p.endpoint != "" {
			o.BaseEndpoint = aws.String(p.endpoint)
		}
		if local {
			// DynamoDB Local sends error responses (every failed
			// condition) without the CRC32 header the SDK checks, and the
			// SDK would log a warning for each.
			o.DisableValidateResponseChecksum = true
		}
	})
	s, err := idemddb.New(client, p.table, p.ddbOpts...)
	if err != nil {
		return nil, err
	}
	where := "region " + cfg.Region
	if p.endpoint != "" {
		where = p.endpoint + localDB
	}
	return &backend{store: s, kind: "dynamodb", desc: fmt.Sprintf("DynamoDB table %s at %s", p.table, where),
		ddb: client, table: p.table, ddbOpts: p.ddbOpts}, nil
}

// redisPingTimeout bounds the first PING openRedis sends.
const redisPingTimeout = 5 * time.Second

// quietRedis drops go-redis's own log lines (one per failed dial), which
// would repeat what the command's error says.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func init() { goredis.SetLogger(quietRedis{}) }

func openRedis(ctx context.Context, p *parsedURL, logTo io.Writer) (*backend, error) {
	var client goredis.UniversalClient
	var addr string
	if p.cluster {
		o, err := goredis.ParseClusterURL(p.redisURL)
		if err != nil {
			return nil, err
		}
		o.DialerRetries = 1
		client, addr = goredis.NewClusterClient(o), strings.Join(o.Addrs, ",")
	} else {
		o, err := goredis.ParseURL(p.redisURL)
		if err != nil {
			return nil, err
		}
		o.DialerRetries = 1
		client, addr = goredis.NewClient(o), o.Addr
	}
	// One quick look before the store's own server check, so that an
	// unreachable server is one clear error rather than the store's
	// warnings and go-redis's retries.
	ctx, cancel := context.WithTimeout(ctx, redisPingTimeout)
	err := client.Ping(ctx).Err()
	cancel()
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", addr, err)
	}
	log := slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := []idemredis.Option{idemredis.WithLogger(log)}
	if p.hasPrefix {
		opts = append(opts, idemredis.WithPrefix(p.prefix))
	}
	s, err := idemredis.New(client, opts...)
	if err != nil {
		client.Close()
		return nil, err
	}
	return &backend{store: s, kind: "redis", desc: fmt.Sprintf("Redis at %s, prefix %q", addr, s.Prefix()),
		prefix: s.Prefix(), close: func() { client.Close() }}, nil
}

func openPostgres(ctx context.Context, p *parsedURL) (*backend, error) {
	cfg, err := pgxpool.ParseConfig(p.pgURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s, err := postgres.New(pool, postgres.WithTable(p.table))
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &backend{store: s, kind: "postgres", desc: fmt.Sprintf("PostgreSQL table %s at %s:%d", p.table, cfg.ConnConfig.Host, cfg.ConnConfig.Port),
		pg: pool, table: p.table, close: pool.Close}, nil
}

// kindName is a store kind as people write it.
func kindName(kind string) string {
	switch kind {
	case "dynamodb":
		return "DynamoDB"
	case "redis":
		return "Redis"
	case "postgres":
		return "PostgreSQL"
	}
	return kind
}
