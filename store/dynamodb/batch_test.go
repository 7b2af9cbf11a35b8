package dynamodb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// unprocessedProxy forwards requests to DynamoDB Local, and answers
// BatchGetItem as a throttled table does, with keys left unprocessed:
//
//   - the next `stall` requests get no items and every key back as
//     unprocessed (< 0: all of them);
//   - then the next `partial` responses keep the first half of their items
//     and list the keys of the other half as unprocessed.
type unprocessedProxy struct {
	keyAttrs       []string
	stall, partial atomic.Int32
	seen           atomic.Int32 // BatchGetItem requests
	maxKeys        atomic.Int32 // the most keys one request asked for
	proxy          *httputil.ReverseProxy
}

func newUnprocessedProxy(t *testing.T, stall, partial int32, keyAttrs ...string) (*unprocessedProxy, string) {
	target, err := url.Parse(dynamodbtest.Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(keyAttrs) == 0 {
		keyAttrs = []string{"id"}
	}
	p := &unprocessedProxy{keyAttrs: keyAttrs, proxy: httputil.NewSingleHostReverseProxy(target)}
	p.stall.Store(stall)
	p.partial.Store(partial)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// take consumes one of n's remaining answers, reporting whether there was
// one (n < 0 never runs out).
func take(n *atomic.Int32) bool {
	for {
		v := n.Load()
		if v == 0 {
			return false
		}
		if v < 0 || n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

type rawItem = map[string]json.RawMessage

func (p *unprocessedProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".BatchGetItem") {
		p.proxy.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		RequestItems map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.seen.Add(1)
	for _, kaa := range req.RequestItems {
		var keys []rawItem
		json.Unmarshal(kaa["Keys"], &keys)
		for {
			m := p.maxKeys.Load()
			if int32(len(keys)) <= m || p.maxKeys.CompareAndSwap(m, int32(len(keys))) {
				break
			}
		}
	}
	if take(&p.stall) {
		resp := map[string]any{"Responses": map[string]any{}, "UnprocessedKeys": req.RequestItems}
		for table := range req.RequestItems {
			resp["Responses"].(map[string]any)[table] = []any{}
		}
		writeJSON(w, resp)
		return
	}
	if !take(&p.partial) {
		p.proxy.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	p.proxy.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		copyResponse(w, rec)
		return
	}
	var resp struct {
		Responses       map[string][]rawItem
		UnprocessedKeys map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		http.Error(w, "proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	if resp.UnprocessedKeys == nil {
		resp.UnprocessedKeys = map[string]map[string]json.RawMessage{}
	}
	for table, items := range resp.Responses {
		keep, moved := items[:len(items)/2], items[len(items)/2:]
		if len(moved) == 0 {
			continue
		}
		keys := make([]rawItem, len(moved))
		for i, it := range moved {
			keys[i] = rawItem{}
			for _, a := range p.keyAttrs {
				keys[i][a] = it[a]
			}
		}
		kaa := map[string]json.RawMessage{}
		for k, v := range req.RequestItems[table] {
			kaa[k] = v
		}
		kaa["Keys"], _ = json.Marshal(keys)
		resp.UnprocessedKeys[table] = kaa
		resp.Responses[table] = keep
	}
	writeJSON(w, resp)
}

// writeJSON answers 200 with v, with the CRC32 header the SDK checks.
func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", "unprocessed-proxy")
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(b)), 10))
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

func copyResponse(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// countedStore returns a store on a fresh table whose client talks to
// endpoint and counts its requests.
func countedStore(t *testing.T, endpoint string, opts ...idemddb.Option) (*idemddb.Store, *reqcount.Counter) {
	t.Helper()
	var n *reqcount.Counter
	client := dynamodb.New(dynamodbtest.Options(endpoint), func(o *dynamodb.Options) { n = dynamodbtest.CountRequests(o) })
	s := dynamodbtest.NewStore(t, client, opts...)
	n.Reset()
	return s, n
}

// fill completes a record for each key, concurrently, and returns them.
func (f *fixture) fill(t *testing.T, keys []string) map[string]*store.Record {
	t.Helper()
	out := make(map[string]*store.Record, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rec := f.claim(k)
			if _, err := f.s.Acquire(f.ctx, rec, f.t0); err != nil {
				t.Errorf("Acquire(%q) = %v", k, err)
				return
			}
			done := *rec
			done.Status, done.Result, done.ExpiresAt = store.StatusCompleted, []byte(strconv.Quote(k)), f.t0.Add(2*time.Hour)
			if err := f.s.Complete(f.ctx, &done); err != nil {
				t.Errorf("Complete(%q) = %v", k, err)
				return
			}
			mu.Lock()
			out[k] = &done
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

func keysN(prefix string, n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("%s#%03d", prefix, i)
	}
	return k
}

// TestGetManyRequests checks GetMany's round trips: one BatchGetItem per
// 100 distinct keys, nothing else.
func TestGetManyRequests(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []idemddb.Option
	}{
		{"plain", nil},
		{"sort-key", []idemddb.Option{idemddb.WithAttributes(idemddb.Attributes{Key: "pk"}), idemddb.WithSortKey("sk", "idempotency#batch")}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			f := newFixture(t, mode.opts...)
			keys := keysN("scope", 250)
			want := f.fill(t, keys)
			asked := append(append(append([]string(nil), keys...), keysN("absent", 10)...), keys[:20]...) // 260 distinct
			f.n.Reset()
			got, err := f.s.GetMany(f.ctx, asked)
			if err != nil {
				t.Fatalf("GetMany: %v", err)
			}
			if len(got) != len(want) {
				t.Errorf("GetMany returned %d records, want %d", len(got), len(want))
			}
			for k, w := range want {
				if g := got[k]; g == nil || string(g.Result) != string(w.Result) || g.Token != w.Token || g.Status != store.StatusCompleted {
					t.Errorf("record %q = %+v, want %+v", k, g, w)
				}
			}
			if b, total := f.n.Get("BatchGetItem"), f.n.Total(); b != 3 || total != 3 {
				t.Errorf("GetMany of 260 distinct keys sent %s; want BatchGetItem=3 and nothing else", f.n)
			}
		})
	}
}

// Keys DynamoDB leaves unprocessed, in part or in whole, are asked for again
// until every record is read.
func TestGetManyUnprocessedKeys(t *testing.T) {
	p, ep := newUnprocessedProxy(t, 2, 3)
	s, n := countedStore(t, ep)
	f := &fixture{s: s, n: n, ctx: t.Context(), t0: time.Now().Truncate(time.Second).Add(24 * time.Hour)}
	keys := keysN("scope", 150)
	want := f.fill(t, keys)
	p.seen.Store(0)
	start := time.Now()
	got, err := s.GetMany(t.Context(), keys)
	if err != nil {
		t.Fatalf("GetMany through unprocessed keys: %v", err)
	}
	if len(got) != len(want) {
		t.Errorf("GetMany returned %d records, want %d", len(got), len(want))
	}
	for k, w := range want {
		if g := got[k]; g == nil || string(g.Result) != string(w.Result) {
			t.Errorf("record %q = %+v", k, g)
		}
	}
	// 2 requests stalled and 3 answered in half: at least 2 chunks + 5.
	if seen := p.seen.Load(); seen < 7 {
		t.Errorf("proxy saw %d BatchGetItem requests; want at least 7 (the stalled and halved ones were not retried?)", seen)
	}
	if m := p.maxKeys.Load(); m > idemddb.MaxBatchGetKeys {
		t.Errorf("a request asked for %d keys, over DynamoDB's %d", m, idemddb.MaxBatchGetKeys)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the retries took %v; the backoff should stay short", d)
	}
}

func TestGetManyUnprocessedPersistent(t *testing.T) {
	p, ep := newUnprocessedProxy(t, -1, 0)
	s, _ := countedStore(t, ep, idemddb.WithMaxAttempts(3))
	got, err := s.GetMany(t.Context(), keysN("scope", 10))
	if !errors.Is(err, store.ErrThrottled) {
		t.Fatalf("GetMany with every key unprocessed = %d records, %v; want ErrThrottled", len(got), err)
	}
	var ue *idemddb.UnprocessedError
	var oe *store.OpError
	if !errors.As(err, &ue) || ue.Keys != 10 || ue.Rounds != 3 {
		t.Errorf("error %v: want an *UnprocessedError for 10 keys after 3 rounds", err)
	}
	if !errors.As(err, &oe) || oe.Op != "GetMany" || oe.Resource != fmt.Sprintf("table %q", s.Table()) {
		t.Errorf("error %#v is not a GetMany *OpError on %q", err, s.Table())
	}
	if seen := p.seen.Load(); seen != 3 {
		t.Errorf("proxy saw %d requests, want 3 (WithMaxAttempts(3) rounds without progress)", seen)
	}
}

// Throttling of the BatchGetItem request itself is retried by the SDK's
// retryer.
func TestGetManyThrottledRequest(t *testing.T) {
	p, ep := newFaultProxy(t, "BatchGetItem", 400, "ProvisionedThroughputExceededException", 2)
	s, _ := countedStore(t, ep)
	rec := &store.Record{Key: "scope#k", Status: store.StatusInProgress, Token: "t", ExpiresAt: time.Now().Add(time.Hour)}
	if _, err := s.Acquire(t.Context(), rec, time.Now()); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetMany(t.Context(), []string{rec.Key})
	if err != nil || got[rec.Key] == nil || got[rec.Key].Token != "t" {
		t.Fatalf("GetMany through 2 throttled attempts = %v, %v", got, err)
	}
	if seen := p.seen.Load(); seen != 3 {
		t.Errorf("proxy saw %d BatchGetItem requests, want 3", seen)
	}

	// Persistent: an error matching ErrThrottled.
	p2, ep2 := newFaultProxy(t, "BatchGetItem", 400, "ThrottlingException", -1)
	s2, _ := countedStore(t, ep2, idemddb.WithMaxAttempts(2))
	if _, err := s2.GetMany(t.Context(), []string{"scope#k"}); !errors.Is(err, store.ErrThrottled) {
		t.Errorf("GetMany under persistent throttling = %v, want ErrThrottled", err)
	}
	if seen := p2.seen.Load(); seen != 2 {
		t.Errorf("proxy saw %d attempts, want 2", seen)
	}
}

// apiOnly hides every method of a client but those of idemddb.API, as a
// hand-written double would.
type apiOnly struct{ idemddb.API }

func TestGetManyWithoutBatchAPI(t *testing.T) {
	f := newFixture(t)
	s, err := idemddb.New(apiOnly{f.client}, f.table)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetMany(f.ctx, []string{"scope#k"}); !errors.Is(err, store.ErrSkip) {
		t.Errorf("GetMany without BatchGetItem = %v, want store.ErrSkip", err)
	}
	// A batch on it claims every item.
	g, err := guard.New(s, guard.WithKeyPath("id"))
	if err != nil {
		t.Fatal(err)
	}
	in := batchInputs(5)
	var runs atomic.Int32
	res := guard.DoBatch(f.ctx, g, "charge", in, countRuns(&runs))
	for i, r := range res {
		if r.Err != nil || r.Value != in[i].ID {
			t.Errorf("item %d = %+v", i, r)
		}
	}
	f.n.Reset()
	guard.DoBatch(f.ctx, g, "charge", in, countRuns(&runs))
	if b, p := f.n.Get("BatchGetItem"), f.n.Get("PutItem"); b != 0 || p != 5 || runs.Load() != 5 {
		t.Errorf("replayed batch without BatchGetItem sent %s, ran %d; want PutItem=5 and 5 runs in all", f.n, runs.Load())
	}
}

func TestGetManyCorruptItem(t *testing.T) {
	f := newFixture(t)
	want := f.fill(t, []string{"charge#good-1", "charge#good-2"})
	f.put(t, map[string]types.AttributeValue{"id": s("charge#bad"), "status": s("WEIRD"), "expiration": num(f.t0.Unix() + 3600)})
	got, err := f.s.GetMany(f.ctx, []string{"charge#good-1", "charge#bad", "charge#good-2"})
	var oe *store.OpError
	if !errors.Is(err, store.ErrCorrupt) || !errors.As(err, &oe) || oe.Key != "charge#bad" {
		t.Errorf("GetMany with a corrupt item: %v; want ErrCorrupt naming charge#bad", err)
	}
	if len(got) != 2 || got["charge#good-1"] == nil || string(got["charge#good-2"].Result) != string(want["charge#good-2"].Result) {
		t.Errorf("GetMany with a corrupt item returned %v; want the two good records", got)
	}
}

// batchItem is an input of the batch tests.
type batchItem struct {
	ID string `json:"id"`
	N  int    `json:"n"`
}

func batchInputs(n int) []batchItem {
	in := make([]batchItem, n)
	for i := range in {
		in[i] = batchItem{ID: fmt.Sprintf("item-%03d", i), N: i}
	}
	return in
}

func countRuns(runs *atomic.Int32) func(context.Context, batchItem) (string, error) {
	return func(_ context.Context, it batchItem) (string, error) {
		runs.Add(1)
		return it.ID, nil
	}
}

// ledger counts side effects by item ID.
type ledger struct {
	mu sync.Mutex
	n  map[string]int // protected by mu
}

func (l *ledger) fn(_ context.Context, it batchItem) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[it.ID]++
	return "done-" + it.ID, nil
}

func (l *ledger) check(t *testing.T, in []batchItem) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, it := range in {
		if n := l.n[it.ID]; n != 1 {
			t.Errorf("%s ran %d times, want 1", it.ID, n)
		}
	}
}

func checkBatch(t *testing.T, in []batchItem, res []guard.ItemResult[string], want func(i int) guard.Outcome) {
	t.Helper()
	for i, r := range res {
		if r.Err != nil || r.Value != "done-"+in[i].ID || r.Outcome != want(i) {
			t.Errorf("item %d = %q, %v, %v; want %q, %v", i, r.Value, r.Outcome, r.Err, "done-"+in[i].ID, want(i))
		}
	}
}

// Acceptance 4: a 250-item batch whose items are all completed costs at
// most three BatchGetItem requests and no writes. The shared floor
// (TestRequestFloor) holds a batch of 100 to one; this one crosses
// BatchGetItem's limit of 100 keys a request.
func TestDoBatchRequestCounts(t *testing.T) {
	f := newFixture(t)
	g, err := guard.New(f.s, guard.WithKeyPath("id"))
	if err != nil {
		t.Fatal(err)
	}
	in := batchInputs(250)
	var l ledger
	res := guard.DoBatch(f.ctx, g, "send", in, l.fn)
	checkBatch(t, in, res, func(int) guard.Outcome { return guard.OutcomeExecuted })
	first := f.n.Snapshot()
	t.Logf("first run of 250 new items: %s", f.n)
	if first["BatchGetItem"] != 3 || first["PutItem"] != 250 || first["UpdateItem"] != 250 || f.n.Total() != 503 {
		t.Errorf("first run sent %s; want BatchGetItem=3 PutItem=250 UpdateItem=250", f.n)
	}

	f.n.Reset()
	res = guard.DoBatch(f.ctx, g, "send", in, l.fn)
	checkBatch(t, in, res, func(int) guard.Outcome { return guard.OutcomeReplayed })
	t.Logf("replay of 250 completed items: %s", f.n)
	if b := f.n.Get("BatchGetItem"); b > 3 || b == 0 {
		t.Errorf("replay sent %d BatchGetItem requests, want 1 to 3", b)
	}
	for _, op := range []string{"PutItem", "UpdateItem", "DeleteItem", "GetItem"} {
		if n := f.n.Get(op); n != 0 {
			t.Errorf("replay sent %d %s requests, want none (all of it: %s)", n, op, f.n)
		}
	}
	l.check(t, in)
}

// Acceptance 3 on DynamoDB: items completed by earlier single calls with the
// same scope and key replay from the bulk read, without running or a write.
func TestDoBatchMixedWithSingleCalls(t *testing.T) {
	f := newFixture(t)
	g, err := guard.New(f.s, guard.WithKeyPath("id"))
	if err != nil {
		t.Fatal(err)
	}
	in := batchInputs(90)
	var l ledger
	for i := 0; i < len(in); i += 3 {
		it := in[i]
		if _, err := guard.Do(f.ctx, g, "send", it, func(ctx context.Context) (string, error) { return l.fn(ctx, it) }); err != nil {
			t.Fatal(err)
		}
	}
	f.n.Reset()
	res := guard.DoBatch(f.ctx, g, "send", in, l.fn)
	checkBatch(t, in, res, func(i int) guard.Outcome {
		if i%3 == 0 {
			return guard.OutcomeReplayed
		}
		return guard.OutcomeExecuted
	})
	l.check(t, in)
	if b, p, u := f.n.Get("BatchGetItem"), f.n.Get("PutItem"), f.n.Get("UpdateItem"); b != 1 || p != 60 || u != 60 {
		t.Errorf("mixed batch sent %s; want BatchGetItem=1 and a PutItem and UpdateItem for each of the 60 new items", f.n)
	}
}

// Acceptance 2: throttling injected on BatchGetItem (keys left unprocessed)
// is retried and the batch completes; persistent throttling fails the
// items that were not read, as retryable store errors, without claims.
func TestDoBatchThrottledLookup(t *testing.T) {
	in := batchInputs(250)
	t.Run("retried", func(t *testing.T) {
		p, ep := newUnprocessedProxy(t, 0, 0)
		s, n := countedStore(t, ep)
		g, err := guard.New(s, guard.WithKeyPath("id"))
		if err != nil {
			t.Fatal(err)
		}
		var l ledger
		checkBatch(t, in, guard.DoBatch(t.Context(), g, "send", in, l.fn), func(int) guard.Outcome { return guard.OutcomeExecuted })

		p.stall.Store(2)
		p.partial.Store(4)
		p.seen.Store(0)
		n.Reset()
		res := guard.DoBatch(t.Context(), g, "send", in, l.fn)
		checkBatch(t, in, res, func(int) guard.Outcome { return guard.OutcomeReplayed })
		l.check(t, in)
		t.Logf("replay through 2 stalled and 4 halved BatchGetItem answers: %s", n)
		if seen := p.seen.Load(); seen < 9 {
			t.Errorf("proxy saw %d BatchGetItem requests; want at least 3 + 6 retries", seen)
		}
		if w := n.Get("PutItem") + n.Get("UpdateItem") + n.Get("DeleteItem"); w != 0 {
			t.Errorf("the throttled replay sent %d writes (%s), want none", w, n)
		}
	})
	t.Run("persistent", func(t *testing.T) {
		p, ep := newUnprocessedProxy(t, 0, 0)
		s, n := countedStore(t, ep, idemddb.WithMaxAttempts(2))
		g, err := guard.New(s, guard.WithKeyPath("id"))
		if err != nil {
			t.Fatal(err)
		}
		var l ledger
		guard.DoBatch(t.Context(), g, "send", in[:10], l.fn)
		p.stall.Store(-1)
		n.Reset()
		res := guard.DoBatch(t.Context(), g, "send", in[:20], l.fn)
		for i, r := range res {
			if !errors.Is(r.Err, store.ErrThrottled) || !errors.Is(r.Err, guard.ErrStore) {
				t.Errorf("item %d = %v, %v; want a store error matching ErrThrottled", i, r.Outcome, r.Err)
			}
		}
		if w := n.Get("PutItem"); w != 0 {
			t.Errorf("a throttled lookup was followed by %d claims, want none", w)
		}
		l.check(t, in[:10])
	})
}

// A corrupt item fails only its own batch item.
func TestDoBatchCorruptItem(t *testing.T) {
	f := newFixture(t)
	g, err := guard.New(f.s, guard.WithKeyPath("id"))
	if err != nil {
		t.Fatal(err)
	}
	in := batchInputs(4)
	var l ledger
	guard.DoBatch(f.ctx, g, "send", in[:2], l.fn)
	// Overwrite item 1's record with one that cannot be read.
	var key string
	guard.Do(f.ctx, g, "send", in[1], func(ctx context.Context) (string, error) { return "", nil },
		guard.WithOutcomeHook(func(_ context.Context, k string, _ *store.Record, _ guard.Outcome) { key = k }))
	if key == "" {
		t.Fatal("no replay hook call for item 1")
	}
	f.put(t, map[string]types.AttributeValue{"id": s(key), "status": s("WEIRD"), "expiration": num(time.Now().Unix() + 3600)})

	res := guard.DoBatch(f.ctx, g, "send", in, l.fn)
	if !errors.Is(res[1].Err, store.ErrCorrupt) {
		t.Errorf("corrupt item error %v, want ErrCorrupt", res[1].Err)
	}
	for _, i := range []int{0, 2, 3} {
		if res[i].Err != nil || res[i].Value != "done-"+in[i].ID {
			t.Errorf("item %d = %+v", i, res[i])
		}
	}
	if res[0].Outcome != guard.OutcomeReplayed || res[2].Outcome != guard.OutcomeExecuted {
		t.Errorf("outcomes %v, %v; want replayed, executed", res[0].Outcome, res[2].Outcome)
	}
	l.check(t, in)
}
