package compattest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/compress"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/postgres"
)

// space is one store's fresh key space in a test: a store on it, and raw
// access, through the store's own client, to the items it holds, each as
// JSON in the store's encoding.
type space struct {
	store store.Store
	// snapshot returns every item of the space, by idempotency key.
	snapshot func(t *testing.T) map[string]json.RawMessage
	// write stores the item raw, as snapshot returned it.
	write func(t *testing.T, key string, raw json.RawMessage)
	// normalize returns raw with what may differ between two encodings of
	// one record by the same code (gzip's bytes) undone.
	normalize func(raw json.RawMessage) (json.RawMessage, error)
	// wrap returns s with the optional interfaces of the space's store
	// that the guard uses (its Transactor), so that a store that wraps the
	// space's keeps them.
	wrap func(s store.Store, m *tokenMap) store.Store
	// execTx runs fn as a transactional call, or is nil for a store
	// without transactions.
	execTx func(ctx context.Context, g *guard.Guard, scope string, input any, fn func(context.Context) (receipt, error), opts ...guard.CallOption) (receipt, guard.Outcome, error)
}

// stores are the stores whose encodings the golden records keep.
var stores = []struct {
	name string
	new  func(t *testing.T) *space
}{
	{"dynamodb", dynamoSpace},
	{"redis", redisSpace},
	{"postgres", postgresSpace},
}

// dynamoSpace is a fresh table of DynamoDB Local in the default layout.
// Its items are JSON in DynamoDB's own attribute-value encoding, as the
// AWS CLI prints them.
func dynamoSpace(t *testing.T) *space {
	client := dynamodbtest.NewClient(t)
	s := dynamodbtest.NewStore(t, client)
	table := aws.String(s.Table())
	return &space{
		store: s,
		snapshot: func(t *testing.T) map[string]json.RawMessage {
			out := map[string]json.RawMessage{}
			p := dynamodb.NewScanPaginator(client, &dynamodb.ScanInput{TableName: table, ConsistentRead: aws.Bool(true)})
			for p.HasMorePages() {
				page, err := p.NextPage(context.Background())
				if err != nil {
					t.Fatalf("scanning %s: %v", *table, err)
				}
				for _, item := range page.Items {
					key := item["id"].(*types.AttributeValueMemberS).Value
					raw, err := itemJSON(item)
					if err != nil {
						t.Fatal(err)
					}
					out[key] = raw
				}
			}
			return out
		},
		write: func(t *testing.T, key string, raw json.RawMessage) {
			item, err := jsonItem(raw)
			if err == nil {
				_, err = client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: table, Item: item})
			}
			if err != nil {
				t.Fatalf("writing the item of %q: %v", key, err)
			}
		},
		normalize: func(raw json.RawMessage) (json.RawMessage, error) {
			var item map[string]map[string]string
			if err := json.Unmarshal(raw, &item); err != nil {
				return nil, err
			}
			if item["data_encoding"]["S"] == compress.Encoding {
				data := item["data"]
				b, err := base64.StdEncoding.DecodeString(data["B"])
				if err != nil {
					return nil, err
				}
				if b, err = compress.Gunzip(b, 64<<20); err != nil {
					return nil, err
				}
				item["data"] = map[string]string{"B (gunzipped)": base64.StdEncoding.EncodeToString(b)}
			}
			return json.Marshal(item)
		},
		wrap: func(s store.Store, m *tokenMap) store.Store {
			return &tokenTxStore[*idemddb.TxWrites]{tokenStore: tokenStore{Store: s, m: m}, tr: s.(store.Transactor[*idemddb.TxWrites])}
		},
		execTx: func(ctx context.Context, g *guard.Guard, scope string, input any, fn func(context.Context) (receipt, error), opts ...guard.CallOption) (receipt, guard.Outcome, error) {
			return adapt.ExecuteTx(ctx, g, scope, input, func(ctx context.Context, _ *idemddb.TxWrites) (receipt, error) { return fn(ctx) }, opts...)
		},
	}
}

// itemJSON is item in DynamoDB's JSON encoding: {"name": {"S": "…"}}; the
// store writes only S, N and B.
func itemJSON(item map[string]types.AttributeValue) (json.RawMessage, error) {
	out := make(map[string]map[string]string, len(item))
	for name, v := range item {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			out[name] = map[string]string{"S": v.Value}
		case *types.AttributeValueMemberN:
			out[name] = map[string]string{"N": v.Value}
		case *types.AttributeValueMemberB:
			out[name] = map[string]string{"B": base64.StdEncoding.EncodeToString(v.Value)}
		default:
			return nil, fmt.Errorf("attribute %q is a %T, which the store does not write", name, v)
		}
	}
	return json.Marshal(out)
}

// jsonItem is the inverse of itemJSON.
func jsonItem(raw json.RawMessage) (map[string]types.AttributeValue, error) {
	var in map[string]map[string]string
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, err
	}
	item := make(map[string]types.AttributeValue, len(in))
	for name, v := range in {
		switch {
		case len(v) != 1:
			return nil, fmt.Errorf("attribute %q: %v is not one typed value", name, v)
		case hasKey(v, "S"):
			item[name] = &types.AttributeValueMemberS{Value: v["S"]}
		case hasKey(v, "N"):
			item[name] = &types.AttributeValueMemberN{Value: v["N"]}
		case hasKey(v, "B"):
			b, err := base64.StdEncoding.DecodeString(v["B"])
			if err != nil {
				return nil, fmt.Errorf("attribute %q: %w", name, err)
			}
			item[name] = &types.AttributeValueMemberB{Value: b}
		default:
			return nil, fmt.Errorf("attribute %q: unknown type in %v", name, v)
		}
	}
	return item, nil
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// redisSpace is a fresh key prefix of the redis-server. Its items are the
// record's hash, field by field, and the key's expiry time (PEXPIRETIME).
func redisSpace(t *testing.T) *space {
	client := redistest.NewClient(t)
	s := redistest.NewStore(t, client)
	prefix := s.Prefix()
	return &space{
		store: s,
		snapshot: func(t *testing.T) map[string]json.RawMessage {
			ctx := context.Background()
			keys, err := client.Keys(ctx, goredisEscape(prefix)+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]json.RawMessage{}
			for _, k := range keys {
				h, err := client.HGetAll(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				exp, err := client.PExpireTime(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				hash := make(map[string]blob, len(h))
				for f, v := range h {
					hash[f] = blob(v)
				}
				raw, err := json.Marshal(redisItem{Hash: hash, PExpireAt: exp.Milliseconds()})
				if err != nil {
					t.Fatal(err)
				}
				out[strings.TrimPrefix(k, prefix)] = raw
			}
			return out
		},
		write: func(t *testing.T, key string, raw json.RawMessage) {
			var it redisItem
			if err := json.Unmarshal(raw, &it); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			args := make([]any, 0, 2*len(it.Hash))
			for f, v := range it.Hash {
				args = append(args, f, string(v))
			}
			_, err := client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				p.HSet(ctx, prefix+key, args...)
				p.PExpireAt(ctx, prefix+key, time.UnixMilli(it.PExpireAt))
				return nil
			})
			if err != nil {
				t.Fatalf("writing the hash of %q: %v", key, err)
			}
		},
		normalize: func(raw json.RawMessage) (json.RawMessage, error) {
			var it redisItem
			if err := json.Unmarshal(raw, &it); err != nil {
				return nil, err
			}
			if it.Hash["data_encoding"] == compress.Encoding {
				b, err := compress.Gunzip([]byte(it.Hash["data"]), 64<<20)
				if err != nil {
					return nil, err
				}
				delete(it.Hash, "data")
				it.Hash["data"+" (gunzipped)"] = blob(b)
			}
			return json.Marshal(it)
		},
		wrap: func(s store.Store, m *tokenMap) store.Store { return &tokenStore{Store: s, m: m} },
	}
}

// redisItem is a record's hash and its key's expiry.
type redisItem struct {
	Hash      map[string]blob `json:"hash"`
	PExpireAt int64           `json:"pexpireat"`
}

// goredisEscape escapes the glob characters of a key prefix for KEYS.
func goredisEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// postgresSpace is a fresh table. Its items are the rows as to_jsonb
// gives them (bytea as "\x…" hex, times in UTC), and are written back
// naming only the columns they have, so that a column added later takes
// its default.
func postgresSpace(t *testing.T) *space {
	pool := postgrestest.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["timezone"] = "UTC" })
	name := postgrestest.NewTable(t, pool, "")
	s, err := postgres.New(pool, postgres.WithTable(name))
	if err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{name}.Sanitize()
	return &space{
		store: s,
		snapshot: func(t *testing.T) map[string]json.RawMessage {
			rows, err := pool.Query(context.Background(), "SELECT key, to_jsonb(t) FROM "+table+" t")
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]json.RawMessage{}
			for rows.Next() {
				var key string
				var row map[string]any
				if err := rows.Scan(&key, &row); err != nil {
					t.Fatal(err)
				}
				raw, err := json.Marshal(row)
				if err != nil {
					t.Fatal(err)
				}
				out[key] = raw
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		},
		write: func(t *testing.T, key string, raw json.RawMessage) {
			var row map[string]any
			if err := json.Unmarshal(raw, &row); err != nil {
				t.Fatal(err)
			}
			cols := make([]string, 0, len(row))
			for c := range row {
				cols = append(cols, pgx.Identifier{c}.Sanitize())
			}
			sort.Strings(cols)
			list := strings.Join(cols, ", ")
			sql := "INSERT INTO " + table + " (" + list + ") SELECT " + list + " FROM jsonb_populate_record(NULL::" + table + ", $1)"
			if _, err := pool.Exec(context.Background(), sql, string(raw)); err != nil {
				t.Fatalf("writing the row of %q: %v", key, err)
			}
		},
		normalize: func(raw json.RawMessage) (json.RawMessage, error) { return raw, nil },
		wrap: func(s store.Store, m *tokenMap) store.Store {
			return &tokenTxStore[pgx.Tx]{tokenStore: tokenStore{Store: s, m: m}, tr: s.(store.Transactor[pgx.Tx])}
		},
		execTx: func(ctx context.Context, g *guard.Guard, scope string, input any, fn func(context.Context) (receipt, error), opts ...guard.CallOption) (receipt, guard.Outcome, error) {
			return adapt.ExecuteTx(ctx, g, scope, input, func(ctx context.Context, tx pgx.Tx) (receipt, error) {
				if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
					return receipt{}, err
				}
				return fn(ctx)
			}, opts...)
		},
	}
}

// blob is a string of bytes as JSON: a string when it is UTF-8, else
// {"base64": "…"}.
type blob string

func (b blob) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(b)) {
		return json.Marshal(string(b))
	}
	return json.Marshal(map[string]string{"base64": base64.StdEncoding.EncodeToString([]byte(b))})
}

func (b *blob) UnmarshalJSON(data []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		var m map[string]string
		if err := json.Unmarshal(data, &m); err != nil {
			return err
		}
		raw, err := base64.StdEncoding.DecodeString(m["base64"])
		*b = blob(raw)
		return err
	}
	var s string
	err := json.Unmarshal(data, &s)
	*b = blob(s)
	return err
}

// tokenMap gives the random fencing tokens of a guard fixed names, in the
// order it first sends them ("token-1", "token-2", …), so that the records
// a run writes are the same every time.
type tokenMap struct {
	mu   sync.Mutex
	to   map[string]string // guard's → stored; protected by mu
	from map[string]string // stored → guard's; protected by mu
}

func (m *tokenMap) fixed(tok string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.to == nil {
		m.to, m.from = map[string]string{}, map[string]string{}
	}
	f, ok := m.to[tok]
	if !ok {
		f = fmt.Sprintf("token-%d", len(m.to)+1)
		m.to[tok], m.from[f] = f, tok
	}
	return f
}

func (m *tokenMap) back(r *store.Record) *store.Record {
	if r == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if tok, ok := m.from[r.Token]; ok {
		r.Token = tok
	}
	return r
}

// tokenStore is a store that stores the guard's tokens under their fixed
// names (see tokenMap).
type tokenStore struct {
	store.Store
	m *tokenMap
}

func (s *tokenStore) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	r := *rec
	r.Token = s.m.fixed(rec.Token)
	old, err := s.Store.Acquire(ctx, &r, now)
	return s.m.back(old), err
}

func (s *tokenStore) Complete(ctx context.Context, rec *store.Record) error {
	r := *rec
	r.Token = s.m.fixed(rec.Token)
	return s.Store.Complete(ctx, &r)
}

func (s *tokenStore) Extend(ctx context.Context, key, token string, lease, expires time.Time) error {
	return s.Store.Extend(ctx, key, s.m.fixed(token), lease, expires)
}

func (s *tokenStore) Release(ctx context.Context, key, token string) error {
	return s.Store.Release(ctx, key, s.m.fixed(token))
}

func (s *tokenStore) Get(ctx context.Context, key string) (*store.Record, error) {
	rec, err := s.Store.Get(ctx, key)
	return s.m.back(rec), err
}

// tokenTxStore is a tokenStore whose store has transactions.
type tokenTxStore[H any] struct {
	tokenStore
	tr store.Transactor[H]
}

func (s *tokenTxStore[H]) Begin(ctx context.Context) (store.Tx[H], error) {
	tx, err := s.tr.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &tokenTx[H]{Tx: tx, m: s.m}, nil
}

type tokenTx[H any] struct {
	store.Tx[H]
	m *tokenMap
}

func (t *tokenTx[H]) Complete(ctx context.Context, rec *store.Record) error {
	r := *rec
	r.Token = t.m.fixed(rec.Token)
	return t.Tx.Complete(ctx, &r)
}
