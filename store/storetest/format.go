package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

// WithNewerFormat gives the suite a way to store records in a newer format
// than the store reads. The suite then checks what the package
// documentation of store asks of such records: Get, Acquire meeting one
// live, GetMany and List report an error matching [store.ErrNewerFormat]
// (a [*store.FormatError] naming both formats), never ErrCorrupt and never
// the record; Acquire writes nothing over a live one; an expired one, or
// a claim whose lease lapsed, is replaced as in any format. Stores whose
// records never leave the process (store/memory) leave it out.
//
// mark changes the record stored under key in s, which the suite has just
// written through s, so that it reads as written in format, a format newer
// than [store.FormatVersion], as a later release of the store would write
// it: it sets the store's format attribute, hash field or column to format
// through the store's own client, and leaves the rest of the record as it
// is. It fails t if it cannot.
func WithNewerFormat(mark func(t *testing.T, s store.Store, key string, format int)) Option {
	return func(c *config) { c.markFormat = mark }
}

// runNewerFormat runs the cases of records in a newer format, if the suite
// was given a way to write them.
func runNewerFormat(t *testing.T, newStore MakeStore, cfg config) {
	t.Run("NewerFormat", func(t *testing.T) {
		if cfg.markFormat == nil {
			t.Skip("no storetest.WithNewerFormat: the suite cannot write a record in a newer format to this store (a store whose records stay in the process needs none)")
		}
		for _, tc := range []struct {
			name string
			fn   func(t *testing.T, h *harness, mark func(key string))
		}{
			{"Get", testNewerGet},
			{"AcquireLive", testNewerAcquireLive},
			{"AcquireReplacesExpired", testNewerAcquireExpired},
			{"AcquireTakesOverLapsed", testNewerAcquireLapsed},
			{"GetMany", testNewerGetMany},
			{"List", testNewerList},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := newStore(t)
				tc.fn(t, newHarness(t, s), func(key string) { cfg.markFormat(t, s, key, store.FormatVersion+1) })
			})
		}
	})
}

// newerFormat reports what is wrong with err, an error of op on a record of
// format FormatVersion+1, or "" if it is the error the contract asks for.
func newerFormat(op string, err error) string {
	var fe *store.FormatError
	switch {
	case err == nil:
		return fmt.Sprintf("%s of a record in format %d returned no error; want one matching store.ErrNewerFormat", op, store.FormatVersion+1)
	case !errors.Is(err, store.ErrNewerFormat) || !errors.As(err, &fe):
		return fmt.Sprintf("%s of a record in format %d = %v; want a *store.FormatError, matching store.ErrNewerFormat", op, store.FormatVersion+1, err)
	case errors.Is(err, store.ErrCorrupt), errors.Is(err, store.ErrConflict):
		return fmt.Sprintf("%s of a record in format %d = %v; it must match neither store.ErrCorrupt nor store.ErrConflict", op, store.FormatVersion+1, err)
	case fe.Format != store.FormatVersion+1 || fe.Known != store.FormatVersion:
		return fmt.Sprintf("%s: FormatError{Format: %d, Known: %d}; want {%d, %d}", op, fe.Format, fe.Known, store.FormatVersion+1, store.FormatVersion)
	}
	return ""
}

// newerRecords stores an in-progress claim and a completed record, both
// live until t0+1h at least, and marks both as written in a newer format.
func (h *harness) newerRecords(t *testing.T, mark func(string)) (claim, done *store.Record) {
	claim = h.claim("scope#newer-claim", time.Hour)
	h.mustAcquire(t, claim, h.t0)
	mark(claim.Key)
	c := h.claim("scope#newer-done", time.Minute)
	h.mustAcquire(t, c, h.t0)
	done = h.mustComplete(t, c, []byte(`{"v":1}`))
	mark(done.Key)
	return claim, done
}

func testNewerGet(t *testing.T, h *harness, mark func(string)) {
	claim, done := h.newerRecords(t, mark)
	for _, key := range []string{claim.Key, done.Key} {
		rec, err := h.s.Get(h.ctx, key)
		if d := newerFormat("Get", err); d != "" {
			t.Error(d)
		}
		if rec != nil {
			t.Errorf("Get(%q) returned a record of a format it does not read: %+v", key, rec)
		}
	}
}

// A live record of a newer format blocks the key, as any live record does,
// but is not handed out: the caller can neither replay it nor tell whether
// it is its own.
func testNewerAcquireLive(t *testing.T, h *harness, mark func(string)) {
	claim, done := h.newerRecords(t, mark)
	for _, key := range []string{claim.Key, done.Key} {
		rec := h.claim(key, time.Minute)
		old, err := h.s.Acquire(h.ctx, rec, h.t0.Add(time.Second))
		if d := newerFormat("Acquire", err); d != "" {
			t.Error(d)
		}
		if old != nil {
			t.Errorf("Acquire(%q) returned a record of a format it does not read: %+v", key, old)
		}
		// Nothing was written: the record still reads as the newer format.
		if _, err := h.s.Get(h.ctx, key); !errors.Is(err, store.ErrNewerFormat) {
			t.Errorf("after a refused Acquire(%q), Get = %v; want the record in the newer format, unchanged", key, err)
		}
	}
}

// What Acquire's condition reads keeps its meaning in every format: an
// expired record of a newer format is replaced.
func testNewerAcquireExpired(t *testing.T, h *harness, mark func(string)) {
	_, done := h.newerRecords(t, mark) // expires at t0+2h
	next := h.claim(done.Key, time.Minute)
	next.ExpiresAt = h.t0.Add(3 * time.Hour)
	if old, err := h.s.Acquire(h.ctx, next, h.t0.Add(2*time.Hour)); err != nil || old != nil {
		t.Fatalf("Acquire over an expired record in a newer format = %+v, %v; want success and no record replaced", old, err)
	}
	if d := sameRecord(h.mustGet(t, done.Key), next); d != "" {
		t.Errorf("the record that replaced one in a newer format differs: %s", d)
	}
}

// A claim of a newer format whose lease lapsed is taken over. The claim it
// replaced cannot be read; a store returns nil for it.
func testNewerAcquireLapsed(t *testing.T, h *harness, mark func(string)) {
	claim2 := h.claim("scope#newer-lapsed", time.Minute)
	claim2.ExpiresAt = h.t0.Add(2 * time.Hour)
	h.mustAcquire(t, claim2, h.t0)
	mark(claim2.Key)
	next := h.claim(claim2.Key, time.Minute)
	next.ExpiresAt = h.t0.Add(3 * time.Hour)
	old, err := h.s.Acquire(h.ctx, next, h.t0.Add(10*time.Minute))
	if err != nil {
		t.Fatalf("Acquire over a lapsed claim in a newer format = %v; want success", err)
	}
	if old != nil {
		t.Errorf("Acquire over a lapsed claim in a newer format returned it: %+v; want nil, a record it cannot read", old)
	}
	if d := sameRecord(h.mustGet(t, claim2.Key), next); d != "" {
		t.Errorf("the claim that took over one in a newer format differs: %s", d)
	}
}

func testNewerGetMany(t *testing.T, h *harness, mark func(string)) {
	bg, ok := h.s.(store.BatchGetter)
	if !ok {
		t.Skipf("%T does not implement store.BatchGetter", h.s)
	}
	claim, done := h.newerRecords(t, mark)
	plain := h.claim("scope#newer-plain", time.Minute)
	h.mustAcquire(t, plain, h.t0)
	got, err := bg.GetMany(h.ctx, []string{claim.Key, done.Key, plain.Key})
	if d := newerFormat("GetMany", err); d != "" {
		t.Error(d)
	}
	checkRecords(t, "GetMany", got, map[string]*store.Record{plain.Key: plain})
}

func testNewerList(t *testing.T, h *harness, mark func(string)) {
	a, ok := h.s.(store.Admin)
	if !ok {
		t.Skipf("%T does not implement store.Admin", h.s)
	}
	h.newerRecords(t, mark)
	plain := h.claim("scope#newer-plain", time.Minute)
	h.mustAcquire(t, plain, h.t0)
	var recs []*store.Record
	q := store.Query{Prefix: "scope#newer-"}
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("List: more than 10 pages of 3 records")
		}
		p, err := a.List(h.ctx, q)
		if err != nil && !errors.Is(err, store.ErrNewerFormat) {
			t.Fatalf("List = %v; want no error, or one matching store.ErrNewerFormat", err)
		}
		if err != nil {
			if d := newerFormat("List", err); d != "" {
				t.Error(d)
			}
		}
		recs = append(recs, p.Records...)
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	got := map[string]*store.Record{}
	for _, r := range recs {
		got[r.Key] = r
	}
	checkRecords(t, "List", got, map[string]*store.Record{plain.Key: plain})
}
