package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/store"
)

// batchAPI is the part of the DynamoDB client that [Store.GetMany] uses.
// *dynamodb.Client satisfies it. It is separate from [API] so that clients
// and test doubles written for API keep working: the store checks for it
// with a type assertion, and a client without it makes GetMany return
// [store.ErrSkip], so batches fall back to one claim per item.
type batchAPI interface {
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

var (
	_ batchAPI          = (*dynamodb.Client)(nil)
	_ store.BatchGetter = (*Store)(nil)
)

// maxBatchGetKeys is the number of keys DynamoDB accepts in one
// BatchGetItem request; [Store.GetMany] sends larger sets in several.
const maxBatchGetKeys = 100

// batchParallelism bounds the BatchGetItem requests one GetMany has in
// flight.
const batchParallelism = 4

// GetMany implements [store.BatchGetter] with BatchGetItem: strongly
// consistent reads of up to 100 keys per request, at most four
// requests in flight, projected onto the attributes a record has. Duplicate
// keys are read once. Keys DynamoDB returns as unprocessed (because the
// table is throttled, or the response reached its 16 MB limit) are asked
// for again after a short exponential backoff with full jitter; after as
// many rounds without progress as the store's retryer makes attempts
// ([WithMaxAttempts]), GetMany gives up with an [*store.OpError] that matches
// [store.ErrThrottled]. Throttling of the request itself is retried by the
// retryer, as for every other request.
//
// An item that cannot be read as a record is left out of the map and
// reported, after the other records are read, as an error matching
// [store.ErrCorrupt]. A client that lacks BatchGetItem (the SDK's
// has it) makes GetMany return [store.ErrSkip].
//
// GetMany needs the IAM action dynamodb:BatchGetItem on the table.
func (s *Store) GetMany(ctx context.Context, keys []string) (map[string]*store.Record, error) {
	const op = "GetMany"
	if err := ctx.Err(); err != nil {
		return nil, s.opErr(op, firstKey(keys), err)
	}
	bc, ok := s.client.(batchAPI)
	if !ok {
		return nil, store.ErrSkip
	}
	uniq := make([]string, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			uniq = append(uniq, k)
		}
	}
	out := make(map[string]*store.Record, len(uniq))
	if len(uniq) == 0 {
		return out, nil
	}
	proj, err := s.projection()
	if err != nil {
		return nil, s.opErr(op, uniq[0], err)
	}

	var (
		mu   sync.Mutex
		errs []error // protected by mu: one per failed chunk or corrupt item
		wg   sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, batchParallelism)
	for start := 0; start < len(uniq); start += maxBatchGetKeys {
		chunk := uniq[start:min(start+maxBatchGetKeys, len(uniq))]
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			recs, bad, err := s.getChunk(ctx, bc, proj, chunk)
			mu.Lock()
			defer mu.Unlock()
			for _, r := range recs {
				out[r.Key] = r
			}
			errs = append(errs, bad...)
			if err != nil {
				errs = append(errs, err)
				cancel() // the other chunks' results would not save the call
			}
		}()
	}
	wg.Wait()
	if len(errs) == 0 {
		if err := ctx.Err(); err != nil {
			return out, s.opErr(op, uniq[0], err)
		}
		return out, nil
	}
	return out, firstError(errs)
}

// firstError returns the error to report from a GetMany: a request failure
// (which may have cancelled the other chunks) before a corrupt item, and
// never a cancellation GetMany caused itself over the failure that caused
// it.
func firstError(errs []error) error {
	var fallback error
	for _, err := range errs {
		if errors.Is(err, store.ErrCorrupt) {
			if fallback == nil {
				fallback = err
			}
			continue
		}
		if !errors.Is(err, context.Canceled) {
			return err
		}
		if fallback == nil || errors.Is(fallback, store.ErrCorrupt) {
			fallback = err
		}
	}
	return fallback
}

func firstKey(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

// batchProjection is the projection expression of a record's attributes.
type batchProjection struct {
	expr  *string
	names map[string]string
}

// recordProjection lists the attributes a record is read from: the key
// attributes and every attribute [config.decode] reads.
func (c *config) recordProjection() expression.ProjectionBuilder {
	attrs := []string{c.keyAttr, c.statusAttr, c.expiryAttr, c.leaseAttr, c.tokenAttr, c.validationAttr, c.dataAttr, c.kindAttr, c.encodingAttr, c.formatAttr}
	if c.sortKeyAttr != "" {
		attrs = append(attrs, c.sortKeyAttr)
	}
	nb := make([]expression.NameBuilder, 0, len(attrs))
	for _, a := range attrs {
		nb = append(nb, name(a))
	}
	return expression.NamesList(nb[0], nb[1:]...)
}

// projection is the projection expression of [config.recordProjection].
func (s *Store) projection() (batchProjection, error) {
	x, err := expression.NewBuilder().WithProjection(s.cfg.recordProjection()).Build()
	if err != nil {
		return batchProjection{}, err
	}
	return batchProjection{expr: x.Projection(), names: x.Names()}, nil
}

// getChunk reads up to maxBatchGetKeys keys, going back for unprocessed
// keys. It returns the records read, errors for items that could not be
// decoded, and the error that stopped it, if any.
func (s *Store) getChunk(ctx context.Context, bc batchAPI, proj batchProjection, keys []string) (recs []*store.Record, bad []error, err error) {
	const op = "GetMany"
	pending := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		pending[i] = s.cfg.keyItem(k)
	}
	limit := s.unprocessedRounds()
	bo := jitterBackoff{base: defaultBackoffBase, max: defaultBackoffMax}
	stalled := 0 // consecutive rounds that read nothing
	for round := 1; ; round++ {
		out, err := bc.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
			RequestItems: map[string]types.KeysAndAttributes{s.table: {
				Keys:                     pending,
				ConsistentRead:           aws.Bool(true),
				ProjectionExpression:     proj.expr,
				ExpressionAttributeNames: proj.names,
			}},
		}, s.optFns...)
		if err != nil {
			return recs, bad, s.opErr(op, keyOf(s.cfg, pending[0]), err)
		}
		got := out.Responses[s.table]
		for _, item := range got {
			rec, err := s.cfg.decode(item)
			if err != nil {
				bad = append(bad, s.opErr(op, keyOf(s.cfg, item), err))
				continue
			}
			recs = append(recs, rec)
		}
		left := out.UnprocessedKeys[s.table].Keys
		if len(left) == 0 {
			return recs, bad, nil
		}
		if len(got) > 0 || len(left) < len(pending) {
			stalled = 0
		} else if stalled++; stalled >= limit {
			return recs, bad, s.opErr(op, keyOf(s.cfg, left[0]), &unprocessedError{Keys: len(left), Rounds: round})
		}
		pending = left
		d, _ := bo.BackoffDelay(stalled, nil)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return recs, bad, s.opErr(op, keyOf(s.cfg, left[0]), ctx.Err())
		}
	}
}

// unprocessedRounds is how many rounds in a row GetMany lets DynamoDB
// leave every pending key unprocessed: the retryer's attempts.
func (s *Store) unprocessedRounds() int {
	switch {
	case s.cfg.retryerSet && s.cfg.retryer != nil:
		return max(s.cfg.retryer.MaxAttempts(), 1)
	case s.cfg.maxAttempts > 0:
		return s.cfg.maxAttempts
	}
	return defaultMaxAttempts
}

// keyOf returns the idempotency key of an item or primary key, for errors.
func keyOf(c *config, item map[string]types.AttributeValue) string {
	attr := c.keyAttr
	if c.sortKeyAttr != "" {
		attr = c.sortKeyAttr
	}
	if v, ok := item[attr].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// unprocessedError is the cause of a [Store.GetMany] error when DynamoDB
// kept returning keys unprocessed, which it does when the table's read
// capacity is exhausted. It matches [store.ErrThrottled].
type unprocessedError struct {
	// Keys is how many keys of the request were still unprocessed.
	Keys int
	// Rounds is how many BatchGetItem requests were sent for them.
	Rounds int
}

// Error says how many keys were left and after how many requests.
func (e *unprocessedError) Error() string {
	return fmt.Sprintf("dynamodb: BatchGetItem left %d keys unprocessed after %d requests", e.Keys, e.Rounds)
}

// Is reports whether target is [store.ErrThrottled].
func (e *unprocessedError) Is(target error) bool { return target == store.ErrThrottled }
