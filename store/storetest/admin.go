package storetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

// runAdmin runs the [store.Admin] cases if the stores newStore makes
// implement it, and says so either way.
func runAdmin(t *testing.T, newStore MakeStore) {
	t.Run("Admin", func(t *testing.T) {
		probe := newStore(t)
		if _, ok := probe.(store.Admin); !ok {
			t.Skipf("%T does not implement store.Admin: operators cannot list or delete its records; Admin cases not run", probe)
		}
		t.Logf("%T implements store.Admin: running the List and Delete cases", probe)
		tests := []struct {
			name string
			fn   func(t *testing.T, h *harness, a store.Admin)
		}{
			{"ListEmpty", testListEmpty},
			{"ListPages", testListPages},
			{"ListFilters", testListFilters},
			{"ListAcrossDeletes", testListAcrossDeletes},
			{"Delete", testAdminDelete},
			{"ContextCancelled", testAdminCancelled},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				s := newStore(t)
				tc.fn(t, newHarness(t, s), s.(store.Admin))
			})
		}
	})
}

// listAll lists every page of q (q.Limit per page), checking each page's
// size and, when the store says so, the newest-first order across pages.
func (h *harness) listAll(t *testing.T, a store.Admin, q store.Query) []*store.Record {
	t.Helper()
	var all []*store.Record
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatalf("List(%+v) has not ended after 1,000 pages", q)
		}
		p, err := a.List(h.ctx, q)
		if err != nil {
			t.Fatalf("List(%+v) = %v", q, err)
		}
		if q.Limit > 0 && len(p.Records) > q.Limit {
			t.Errorf("List(%+v) returned %d records, over the limit", q, len(p.Records))
		}
		for _, r := range p.Records {
			if p.NewestFirst && len(all) > 0 && r.ExpiresAt.After(all[len(all)-1].ExpiresAt) {
				t.Errorf("List says newest first, but %q (expires t0%+v) follows %q (t0%+v)",
					r.Key, r.ExpiresAt.Sub(h.t0), all[len(all)-1].Key, all[len(all)-1].ExpiresAt.Sub(h.t0))
			}
			all = append(all, r)
		}
		if p.Next == "" {
			return all
		}
		if p.Next == q.Cursor {
			t.Fatalf("List(%+v) returned its own cursor as the next one", q)
		}
		q.Cursor = p.Next
	}
}

// checkListed compares the listed records with want, by key: each exactly
// once, as stored.
func checkListed(t *testing.T, what string, got []*store.Record, want map[string]*store.Record) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range got {
		if seen[r.Key] {
			t.Errorf("%s: %q listed twice", what, r.Key)
		}
		seen[r.Key] = true
		w, ok := want[r.Key]
		if !ok {
			t.Errorf("%s: listed %q, which it should not", what, r.Key)
			continue
		}
		if d := sameRecord(r, w); d != "" {
			t.Errorf("%s: %q differs from the stored record: %s", what, r.Key, d)
		}
	}
	var missing []string
	for k := range want {
		if !seen[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Errorf("%s: left out %q", what, missing)
	}
}

// adminFixture stores records in every state, under two scopes and two
// keys whose prefixes hold LIKE and glob metacharacters, with distinct
// expiries, and returns them by key.
func (h *harness) adminFixture(t *testing.T) map[string]*store.Record {
	t.Helper()
	want := map[string]*store.Record{}
	add := func(key string, i int, complete bool, kind store.ResultKind) {
		rec := h.claim(key, 30*time.Second)
		rec.ExpiresAt = h.t0.Add(time.Duration(i+1) * time.Minute)
		h.mustAcquire(t, rec, h.t0)
		if !complete {
			want[key] = rec
			return
		}
		done := *rec
		done.Status, done.ResultKind, done.Result = store.StatusCompleted, kind, []byte(fmt.Sprintf(`{"n":%d}`, i))
		done.ExpiresAt = h.t0.Add(time.Duration(i+1) * time.Hour)
		if err := h.s.Complete(h.ctx, &done); err != nil {
			t.Fatalf("Complete(%q) = %v", key, err)
		}
		want[key] = &done
	}
	for i := range 5 {
		add(fmt.Sprintf("scope-a#%d", i), i, i%2 == 0, store.ResultValue)
		add(fmt.Sprintf("scope-b#%d", i), 10+i, i%2 == 1, store.ResultError)
	}
	// Only the first matches the prefix "sc%pe_x*#" taken literally; the
	// second would match it as a LIKE pattern, the third as a glob.
	add("sc%pe_x*#1", 20, true, store.ResultValue)
	add("scXpeYx*#1", 21, true, store.ResultValue)
	add("sc%pe_xQ#1", 22, false, store.ResultValue)
	// Two records with the same expiry, so a cursor must tell them apart
	// by more than the expiry.
	for _, k := range []string{"scope-c#same-1", "scope-c#same-2"} {
		rec := h.claim(k, 30*time.Second)
		rec.ExpiresAt = h.t0.Add(90 * time.Minute)
		h.mustAcquire(t, rec, h.t0)
		want[k] = rec
	}
	return want
}

func testListEmpty(t *testing.T, h *harness, a store.Admin) {
	p, err := a.List(h.ctx, store.Query{})
	if err != nil {
		t.Fatalf("List of an empty store = %v", err)
	}
	if len(p.Records) != 0 || p.Next != "" {
		t.Errorf("List of an empty store = %d records, next %q; want none and no next page", len(p.Records), p.Next)
	}
}

func testListPages(t *testing.T, h *harness, a store.Admin) {
	want := h.adminFixture(t)
	for _, limit := range []int{0, 1, 3, 100} {
		checkListed(t, fmt.Sprintf("List with limit %d", limit), h.listAll(t, a, store.Query{Limit: limit}), want)
	}
}

func testListFilters(t *testing.T, h *harness, a store.Admin) {
	all := h.adminFixture(t)
	for _, q := range []store.Query{
		{Prefix: "scope-a#"},
		{Prefix: "scope-b#", Limit: 2},
		{Status: store.StatusCompleted, Limit: 4},
		{Status: store.StatusInProgress},
		{Prefix: "scope-a#", Status: store.StatusInProgress, Limit: 1},
		{Prefix: "sc%pe_x*#"},
		{Prefix: "scope-z#"},
	} {
		want := map[string]*store.Record{}
		for k, r := range all {
			if len(k) >= len(q.Prefix) && k[:len(q.Prefix)] == q.Prefix && (q.Status == 0 || r.Status == q.Status) {
				want[k] = r
			}
		}
		checkListed(t, fmt.Sprintf("List(prefix %q, status %v)", q.Prefix, q.Status), h.listAll(t, a, q), want)
	}
}

// testListAcrossDeletes deletes records between pages: one already listed
// and one not yet listed. Paging goes on from the cursor, with no record
// listed twice and none of the remaining ones left out.
func testListAcrossDeletes(t *testing.T, h *harness, a store.Admin) {
	want := h.adminFixture(t)
	p, err := a.List(h.ctx, store.Query{Limit: 3})
	if err != nil || p.Next == "" || len(p.Records) == 0 {
		t.Fatalf("first page = %d records, next %q, %v; want some and a next page", len(p.Records), p.Next, err)
	}
	listed := p.Records
	gone := listed[0].Key
	var later string
	for k := range want {
		if !contains(listed, k) {
			later = k
			break
		}
	}
	for _, k := range []string{gone, later} {
		if err := a.Delete(h.ctx, k); err != nil {
			t.Fatalf("Delete(%q) = %v", k, err)
		}
	}
	delete(want, later)
	rest := h.listAll(t, a, store.Query{Limit: 3, Cursor: p.Next})
	checkListed(t, "pages across deletes", append(listed, rest...), want)
}

func contains(recs []*store.Record, key string) bool {
	for _, r := range recs {
		if r.Key == key {
			return true
		}
	}
	return false
}

func testAdminDelete(t *testing.T, h *harness, a store.Admin) {
	held := h.claim("scope#delete-held", time.Hour)
	h.mustAcquire(t, held, h.t0)
	done := h.claim("scope#delete-done", time.Minute)
	h.mustAcquire(t, done, h.t0)
	h.mustComplete(t, done, []byte(`"done"`))
	other := h.claim("scope#delete-other", time.Minute)
	h.mustAcquire(t, other, h.t0)
	for _, k := range []string{held.Key, done.Key} {
		if err := a.Delete(h.ctx, k); err != nil {
			t.Fatalf("Delete(%q) = %v", k, err)
		}
		if _, err := h.s.Get(h.ctx, k); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after Delete(%q), Get = %v; want ErrNotFound", k, err)
		}
	}
	if err := a.Delete(h.ctx, held.Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
	if err := a.Delete(h.ctx, "scope#never-written"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Delete of an absent key = %v, want ErrNotFound", err)
	}
	if d := sameRecord(h.mustGet(t, other.Key), other); d != "" {
		t.Errorf("Delete changed another record: %s", d)
	}
	// Deleted inside its lease: the next caller acquires at once, and the
	// old holder is fenced out.
	h.mustAcquire(t, h.claim(held.Key, time.Minute), h.t0.Add(time.Second))
	if err := h.s.Release(h.ctx, held.Key, held.Token); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("the deleted claim's Release = %v, want ErrTokenMismatch", err)
	}
}

func testAdminCancelled(t *testing.T, h *harness, a store.Admin) {
	rec := h.claim("scope#admin-cancelled", time.Minute)
	h.mustAcquire(t, rec, h.t0)
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	if _, err := a.List(ctx, store.Query{}); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a cancelled context = %v, want context.Canceled", err)
	}
	if err := a.Delete(ctx, rec.Key); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete with a cancelled context = %v, want context.Canceled", err)
	}
	h.mustGet(t, rec.Key)
}
