package storetest

import (
	"context"
	"errors"
	"fmt"
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
		runCases(t, newStore, []optionalCase[store.Admin]{
			{"ListEmpty", testListEmpty},
			{"ListPages", testListPages},
			{"ListAsStored", testListAsStored},
			{"ListFilters", testListFilters},
			{"ListPrefix", testListPrefix},
			{"ListAcrossDeletes", testListAcrossDeletes},
			{"Delete", testAdminDelete},
			{"ContextCancelled", testAdminCancelled},
		})
	})
}

// listAll pages through q (q.Limit a page) to the last page and returns the
// records in the order listed. It fails the test when a page holds more
// than the limit, a record does not match q, a store that says it lists
// newest first does not, a page hands back its own cursor, or the listing
// does not end within maxPages.
func (h *harness) listAll(t *testing.T, a store.Admin, q store.Query, maxPages int) []*store.Record {
	t.Helper()
	var all []*store.Record
	for pages := 1; ; pages++ {
		if pages > maxPages {
			t.Fatalf("List(%+v) did not end within %d pages", q, maxPages)
		}
		p, err := a.List(h.ctx, q)
		if err != nil {
			t.Fatalf("List(%+v) page %d = %v", q, pages, err)
		}
		if q.Limit > 0 && len(p.Records) > q.Limit {
			t.Errorf("List page %d holds %d records, over the limit %d", pages, len(p.Records), q.Limit)
		}
		for _, r := range p.Records {
			if len(r.Key) < len(q.Prefix) || r.Key[:len(q.Prefix)] != q.Prefix {
				t.Errorf("List(prefix %q) returned %q", q.Prefix, r.Key)
			}
			if q.Status != 0 && r.Status != q.Status {
				t.Errorf("List(status %v) returned %q with status %v", q.Status, r.Key, r.Status)
			}
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

// checkListed compares the listed records with want, by key: each as
// stored, none left out, none extra. A store may list a record more than
// once when its own iteration does (Redis SCAN during a rehash), as long
// as it is the same record each time.
func checkListed(t *testing.T, what string, got []*store.Record, want map[string]*store.Record) {
	t.Helper()
	byKey := make(map[string]*store.Record, len(got))
	for _, r := range got {
		if prev, ok := byKey[r.Key]; ok {
			if d := sameRecord(r, prev); d != "" {
				t.Errorf("%s: %q listed twice, differently: %s", what, r.Key, d)
			}
		}
		byKey[r.Key] = r
	}
	checkRecords(t, what, byKey, want)
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

// fillAdmin stores n records under scope, every third completed, and
// returns them by key as stored.
func (h *harness) fillAdmin(t *testing.T, scope string, n int) map[string]*store.Record {
	t.Helper()
	want := make(map[string]*store.Record, n)
	for i := range n {
		r := h.claim(fmt.Sprintf("%s#%03d", scope, i), time.Minute)
		h.mustAcquire(t, r, h.t0)
		want[r.Key] = r
		if i%3 == 0 {
			want[r.Key] = h.mustComplete(t, r, []byte(fmt.Sprintf(`{"n":%d}`, i)))
		}
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

// testListPages lists 95 records at several page sizes: every record comes
// back, no page is over the limit, and the listing ends.
func testListPages(t *testing.T, h *harness, a store.Admin) {
	want := h.fillAdmin(t, "pages", 95)
	for _, limit := range []int{0, 1, 10, 1000} {
		checkListed(t, fmt.Sprintf("List with limit %d", limit), h.listAll(t, a, store.Query{Limit: limit}, 200), want)
	}
}

// testListAsStored lists records in every state: in progress (with and
// without a lease, lapsed), completed with each result kind, and one
// released, which is gone.
func testListAsStored(t *testing.T, h *harness, a store.Admin) {
	want := map[string]*store.Record{}
	lease := h.claim("stored#lease", 30*time.Second)
	noLease := h.claim("stored#no-lease", 0)
	lapsed := h.claim("stored#lapsed", time.Second)
	value := h.claim("stored#value", time.Minute)
	unavailable := h.claim("stored#unavailable", time.Minute)
	released := h.claim("stored#released", time.Minute)
	for _, r := range []*store.Record{lease, noLease, lapsed, value, unavailable, released} {
		h.mustAcquire(t, r, h.t0)
		want[r.Key] = r
	}
	want[value.Key] = h.mustComplete(t, value, make([]byte, 40<<10)) // compressible
	u := *unavailable
	u.Status, u.ResultKind, u.ExpiresAt = store.StatusCompleted, store.ResultUnavailable, h.t0.Add(2*time.Hour)
	if err := h.s.Complete(h.ctx, &u); err != nil {
		t.Fatalf("Complete(unavailable) = %v", err)
	}
	want[u.Key] = &u
	if err := h.s.Release(h.ctx, released.Key, released.Token); err != nil {
		t.Fatalf("Release = %v", err)
	}
	delete(want, released.Key)
	checkListed(t, "List", h.listAll(t, a, store.Query{Limit: 2}, 50), want)
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
		checkListed(t, fmt.Sprintf("List(prefix %q, status %v)", q.Prefix, q.Status), h.listAll(t, a, q, 100), want)
	}
}

// testListPrefix keeps records whose key starts with the prefix, taken
// literally: characters that are patterns elsewhere (*, ?, [, ], \, %, _)
// match only themselves.
func testListPrefix(t *testing.T, h *harness, a store.Admin) {
	scopes := []string{"charge", "charge-refund", "ch*rge", "ch?rge", "c[h]arge", `ch\arge`, "ch%rge", "ch_rge"}
	byScope := map[string]map[string]*store.Record{}
	for _, s := range scopes {
		byScope[s] = h.fillAdmin(t, s, 4)
	}
	for _, s := range scopes {
		checkListed(t, "List("+s+"#)", h.listAll(t, a, store.Query{Prefix: s + "#", Limit: 3}, 50), byScope[s])
	}
	got := h.listAll(t, a, store.Query{Prefix: "charge"}, 50)
	want := map[string]*store.Record{}
	for _, s := range []string{"charge", "charge-refund"} {
		for k, r := range byScope[s] {
			want[k] = r
		}
	}
	checkListed(t, "List(charge)", got, want)
	if got := h.listAll(t, a, store.Query{Prefix: "nothing#"}, 50); len(got) != 0 {
		t.Errorf("List of a prefix nothing has = %d records", len(got))
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
	rest := h.listAll(t, a, store.Query{Limit: 3, Cursor: p.Next}, 100)
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
