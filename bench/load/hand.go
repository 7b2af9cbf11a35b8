package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// The hand-written baselines: what a careful engineer writes without this
// library, on Redis and on PostgreSQL. The key is derived on every call,
// from encoding/json and SHA-256 of the request; the claim and the read of
// what holds the key are one command or one statement; the result is
// stored as one value. They keep no lease apart from the key's expiry, no
// fencing token on Redis, no payload hash, no telemetry and no expiry
// takeover on PostgreSQL (an expired row stays until something deletes it):
// what the guard and the stores do beyond this is counted as their cost.

// handKey is the hand-written key of a request: scope, "#", and the hex
// SHA-256 of the request's JSON, the guard's key's shape.
func handKey(scope string, o Order) (string, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return scope + "#" + hex.EncodeToString(sum[:]), nil
}

// Redis: one string per key, "P" and a token while the call runs, "C" and
// the result's JSON once it is done. The claim is SET key P<token> NX GET
// PX <lease>: it writes the claim if the key is free and returns what holds
// it otherwise, in one command. The completion is SET key C<json> PX <ttl>.

const (
	handPending = 'P'
	handDone    = 'C'
)

// handClaim claims key, returning "" if it did, or the value that holds it.
func (r *redisBench) handClaim(ctx context.Context, key string) (string, error) {
	old, err := r.client.SetArgs(ctx, key, string(handPending)+newToken(),
		goredis.SetArgs{Mode: "NX", Get: true, TTL: rawLease}).Result()
	if errors.Is(err, goredis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if old == "" {
		return "", fmt.Errorf("claim of %s: an empty value holds the key", key)
	}
	return old, nil
}

// handMiss is a hand-written first call: the key, the claim, the function,
// the result stored.
func (r *redisBench) handMiss(ctx context.Context, b *bench, scope string, in Order) error {
	key, err := handKey(r.prefix+scope, in)
	if err != nil {
		return err
	}
	old, err := r.handClaim(ctx, key)
	if err != nil {
		return err
	}
	if old != "" {
		return fmt.Errorf("miss of %s: the key was taken", key)
	}
	b.bodyRuns.Add(1)
	data, err := json.Marshal(charge(in))
	if err != nil {
		return err
	}
	value := make([]byte, 0, 1+len(data))
	value = append(append(value, handDone), data...)
	return r.client.Set(ctx, key, value, rawTTL).Err()
}

// handReplay is a hand-written call whose key is done: the key, the claim,
// which returns the stored value, and the result decoded from it.
func (r *redisBench) handReplay(ctx context.Context, scope string, in Order) error {
	key, err := handKey(r.prefix+scope, in)
	if err != nil {
		return err
	}
	old, err := r.handClaim(ctx, key)
	if err != nil {
		return err
	}
	if old == "" || old[0] != handDone {
		return fmt.Errorf("replay of %s: the key holds %.20q, not a result", key, old)
	}
	var rc Receipt
	return json.Unmarshal([]byte(old[1:]), &rc)
}

// PostgreSQL: one row per key in a table of its own (handTable), its
// result NULL while the call runs. The claim is one autocommit statement
// that inserts the row unless the key exists and returns the existing
// row's result otherwise; the completion is one UPDATE fenced by the
// claim's token.

const handTable = `CREATE TABLE %s (
    key        text        PRIMARY KEY,
    token      text        NOT NULL,
    result     bytea,
    expires_at timestamptz NOT NULL
)`

type handStatements struct{ claim, complete string }

func newHandStatements(table string) handStatements {
	t := pgx.Identifier{table}.Sanitize()
	return handStatements{
		// A row inserted by another caller after this statement's snapshot
		// conflicts with the INSERT but is not seen by the SELECT: the
		// statement returns no row then, and the claim is sent again.
		claim: `WITH ins AS (
    INSERT INTO ` + t + ` (key, token, expires_at) VALUES ($1, $2, $3)
    ON CONFLICT (key) DO NOTHING
    RETURNING true)
SELECT true, NULL::bytea FROM ins
UNION ALL
SELECT false, result FROM ` + t + ` WHERE key = $1`,
		complete: `UPDATE ` + t + ` SET result = $3, expires_at = $4 WHERE key = $1 AND token = $2`,
	}
}

// handClaim claims key under token; it returns whether it did, and the
// result stored under the key otherwise (nil while the holder runs).
func (p *pgBench) handClaim(ctx context.Context, key, token string) (won bool, result []byte, err error) {
	for range 3 {
		err = p.pool.QueryRow(ctx, p.hand.claim, key, token, time.Now().Add(max(rawTTL, rawLease))).Scan(&won, &result)
		if !errors.Is(err, pgx.ErrNoRows) {
			return won, result, err
		}
	}
	return false, nil, fmt.Errorf("claim of %s: neither inserted nor found", key)
}

// handMiss is a hand-written first call: the key, the claim, the function,
// the fenced UPDATE that stores the result.
func (p *pgBench) handMiss(ctx context.Context, b *bench, scope string, in Order) error {
	key, err := handKey(scope, in)
	if err != nil {
		return err
	}
	token := newToken()
	won, _, err := p.handClaim(ctx, key, token)
	if err != nil {
		return err
	}
	if !won {
		return fmt.Errorf("miss of %s: the key was taken", key)
	}
	b.bodyRuns.Add(1)
	data, err := json.Marshal(charge(in))
	if err != nil {
		return err
	}
	tag, err := p.pool.Exec(ctx, p.hand.complete, key, token, data, time.Now().Add(rawTTL))
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("completion of %s: the claim was lost", key)
	}
	return nil
}

// handReplay is a hand-written call whose key is done: the key, the claim,
// which returns the stored result, and the result decoded.
func (p *pgBench) handReplay(ctx context.Context, scope string, in Order) error {
	key, err := handKey(scope, in)
	if err != nil {
		return err
	}
	won, result, err := p.handClaim(ctx, key, newToken())
	if err != nil {
		return err
	}
	if won || result == nil {
		return fmt.Errorf("replay of %s: no result stored (claimed: %v)", key, won)
	}
	var rc Receipt
	return json.Unmarshal(result, &rc)
}
