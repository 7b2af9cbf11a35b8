package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
)

// The HTTP scenarios: what httpguard's middleware costs over a hand-written
// idempotency handler on the same Redis, in process (ServeHTTP into an
// httptest.ResponseRecorder, the requests built before the clock starts),
// so that neither the network nor the HTTP server is in the figures. Both
// wrap the same business handler, which reads a 70-byte JSON body and
// answers 201 with 60 bytes of JSON.
const (
	RedisHTTPHandFirst     = "redis_http_hand_first"
	RedisHTTPGuardedFirst  = "redis_http_guarded_first"
	RedisHTTPHandReplay    = "redis_http_hand_replay"
	RedisHTTPGuardedReplay = "redis_http_guarded_replay"
)

func isHTTP(name string) bool {
	switch name {
	case RedisHTTPHandFirst, RedisHTTPGuardedFirst, RedisHTTPHandReplay, RedisHTTPGuardedReplay:
		return true
	}
	return false
}

const (
	httpBody     = `{"order_id":"o-1042","amount":1999,"currency":"EUR","card":"tok_visa"}`
	httpResponse = `{"charge_id":"ch_3MmlLrLkdIwHu7ix0snN0B15","status":"succeeded"}`
	httpKey      = "Idempotency-Key"
)

// httpSide holds the two middlewares and the keys of the completed
// requests the replay scenarios send.
type httpSide struct {
	hand, guarded http.Handler
	replayKeys    [][]string // header values, one []string{key} each
}

func newHTTPSide(r *redisBench, b *bench) (*httpSide, error) {
	business := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b.bodyRuns.Add(1)
		io.Copy(io.Discard, req.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, httpResponse)
	})
	g, err := guard.New(r.store)
	if err != nil {
		return nil, err
	}
	return &httpSide{
		hand:    &handHTTP{client: r.client, prefix: r.prefix + "hand-http:", next: business},
		guarded: httpguard.MustMiddleware(g)(business),
	}, nil
}

// handHTTP is the hand-written idempotency handler: the key is the
// Idempotency-Key header; SET key P NX GET PX <lease> claims it or returns
// what holds it; the response is captured while it is sent and stored as
// one value, "C", the status in three digits, the Content-Type, a newline
// and the body; a 5xx response gives the key back. A request whose key is
// held gets 409, one whose key is done the stored response.
type handHTTP struct {
	client *goredis.Client
	prefix string
	next   http.Handler
}

func (h *handHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k := r.Header.Get(httpKey)
	if k == "" {
		h.next.ServeHTTP(w, r)
		return
	}
	ctx := r.Context()
	key := h.prefix + k
	old, err := h.client.SetArgs(ctx, key, "P", goredis.SetArgs{Mode: "NX", Get: true, TTL: rawLease}).Result()
	switch {
	case errors.Is(err, goredis.Nil):
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case len(old) >= 5 && old[0] == handDone:
		status, _ := strconv.Atoi(old[1:4])
		ct, body, _ := strings.Cut(old[4:], "\n")
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Idempotency-Key-Status", "replayed")
		w.WriteHeader(status)
		io.WriteString(w, body)
		return
	default:
		http.Error(w, "a request with this key is in progress", http.StatusConflict)
		return
	}
	c := &capture{ResponseWriter: w}
	h.next.ServeHTTP(c, r)
	if c.status >= 500 {
		h.client.Del(context.WithoutCancel(ctx), key)
		return
	}
	ct := w.Header().Get("Content-Type")
	v := make([]byte, 0, 5+len(ct)+c.body.Len())
	v = append(v, handDone)
	v = strconv.AppendInt(v, int64(c.status), 10)
	v = append(append(append(v, ct...), '\n'), c.body.Bytes()...)
	h.client.Set(context.WithoutCancel(ctx), key, v, rawTTL)
}

// capture passes a response through and keeps its status and body.
type capture struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (c *capture) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.body.Write(p)
	return c.ResponseWriter.Write(p)
}

// newHTTPRequest returns a request of the scenarios, its key header set to
// key (a []string{key}, shared and never changed).
func newHTTPRequest(key []string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(httpBody))
	r.Header.Set("Content-Type", "application/json")
	r.Header[httpKey] = key
	return r
}

// serveHTTP sends r to h and checks the answer: 201, and marked replayed
// when replay is true.
func serveHTTP(h http.Handler, r *http.Request, replay bool) error {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusCreated || w.Body.String() != httpResponse {
		return fmt.Errorf("%s: status %d: %.200s", r.Header.Get(httpKey), w.Code, w.Body.String())
	}
	if got := w.Header().Get("Idempotency-Key-Status") == "replayed"; got != replay {
		return fmt.Errorf("%s: replayed %v, want %v", r.Header.Get(httpKey), got, replay)
	}
	return nil
}

// populate completes n requests through each middleware for the replay
// scenarios, with keys idPrefix-0 … idPrefix-(n-1).
func (s *httpSide) populate(n int, idPrefix string) error {
	s.replayKeys = make([][]string, n)
	for i := range n {
		s.replayKeys[i] = []string{fmt.Sprintf("%s-%d", idPrefix, i)}
		for _, h := range []http.Handler{s.hand, s.guarded} {
			if err := serveHTTP(h, newHTTPRequest(s.replayKeys[i]), false); err != nil {
				return fmt.Errorf("completing request %d: %w", i, err)
			}
		}
	}
	return nil
}

// prepare returns the operation of an HTTP scenario with ops operations,
// its requests built before the clock starts. Replays send completed keys,
// worker w the keys w, w+W, w+2W, … (W workers) as in the other replay
// scenarios, so that no two requests in flight share a key.
func (s *httpSide) prepare(name string, ops, workers int, newKey func() string) operation {
	reqs := make([]*http.Request, ops)
	h, replay := s.hand, false
	switch name {
	case RedisHTTPGuardedFirst, RedisHTTPGuardedReplay:
		h = s.guarded
	}
	switch name {
	case RedisHTTPHandReplay, RedisHTTPGuardedReplay:
		replay = true
	}
	for i := range reqs {
		reqs[i] = newHTTPRequest(nil)
		if !replay {
			reqs[i].Header[httpKey] = []string{newKey()}
		}
	}
	if !replay {
		return func(_ context.Context, i, _, _ int) error { return serveHTTP(h, reqs[i], false) }
	}
	per := max(len(s.replayKeys)/workers, 1)
	return func(_ context.Context, i, w, n int) error {
		reqs[i].Header[httpKey] = s.replayKeys[(w+workers*(n%per))%len(s.replayKeys)]
		return serveHTTP(h, reqs[i], true)
	}
}
