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
			t.Skipf("%T does not implement store.Admin: List and Delete cases not run", probe)
		}
		t.Logf("%T implements store.Admin: running the List and Delete cases", probe)
		runCases(t, newStore, []optionalCase[store.Admin]{
			{"ListEmpty", testListEmpty},
			{"ListPages", testListPages},
			{"ListAsStored", testListAsStored},
			{"ListPrefix", testListPrefix},
			{"ListStatus", testListStatus},
			{"ListContextCancelled", testListCancelled},
			{"Delete", testDelete},
		})
	})
}

// listAll pages through q until the last page and returns every record
// listed, by key. It fails the test when a page holds more than the limit,
// when a record is listed that does not match q, or when the listing does
// not end within maxPages.
func (h *harness) listAll(t *testing.T, a store.Admin, q store.Query, maxPages int) (map[string]*store.Record, int) {
	t.Helper()
	got := map[string]*store.Record{}
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
			// A store may list a record twice (Redis SCAN during a
			// rehash); it must be the same record.
			if prev, ok := got[r.Key]; ok {
				if d := sameRecord(r, prev); d != "" {
					t.Errorf("List returned %q twice, differently: %s", r.Key, d)
				}
			}
			got[r.Key] = r
		}
		if p.Next == "" {
			return got, pages
		}
		q.Cursor = p.Next
	}
}

func testListEmpty(t *testing.T, h *harness, a store.Admin) {
	p, err := a.List(h.ctx, store.Query{})
	if err != nil || len(p.Records) != 0 || p.Next != "" {
		t.Errorf("List of an empty store = %d records, next %q, %v; want none, no next page", len(p.Records), p.Next, err)
	}
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

// checkListed compares the listed records with want.
func checkListed(t *testing.T, got, want map[string]*store.Record) {
	t.Helper()
	checkRecords(t, "List", got, want)
}

// testListPages lists 95 records 10 at a time: every record comes back,
// no page is over the limit, and the listing ends.
func testListPages(t *testing.T, h *harness, a store.Admin) {
	want := h.fillAdmin(t, "pages", 95)
	got, pages := h.listAll(t, a, store.Query{Limit: 10}, 200)
	checkListed(t, got, want)
	if pages < 10 {
		t.Errorf("95 records 10 a page took %d pages", pages)
	}
	// The default page size works too.
	got, _ = h.listAll(t, a, store.Query{}, 200)
	checkListed(t, got, want)
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
	got, _ := h.listAll(t, a, store.Query{Limit: 2}, 50)
	checkListed(t, got, want)
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
		got, _ := h.listAll(t, a, store.Query{Prefix: s + "#", Limit: 3}, 50)
		checkListed(t, got, byScope[s])
	}
	got, _ := h.listAll(t, a, store.Query{Prefix: "charge"}, 50)
	want := map[string]*store.Record{}
	for _, s := range []string{"charge", "charge-refund"} {
		for k, r := range byScope[s] {
			want[k] = r
		}
	}
	checkListed(t, got, want)
	if got, _ := h.listAll(t, a, store.Query{Prefix: "nothing#"}, 50); len(got) != 0 {
		t.Errorf("List of a prefix nothing has = %d records", len(got))
	}
}

func testListStatus(t *testing.T, h *harness, a store.Admin) {
	all := h.fillAdmin(t, "status", 30)
	for _, st := range []store.Status{store.StatusInProgress, store.StatusCompleted} {
		want := map[string]*store.Record{}
		for k, r := range all {
			if r.Status == st {
				want[k] = r
			}
		}
		got, _ := h.listAll(t, a, store.Query{Status: st, Limit: 4}, 100)
		checkListed(t, got, want)
	}
}

func testListCancelled(t *testing.T, h *harness, a store.Admin) {
	h.fillAdmin(t, "cancelled", 2)
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	if _, err := a.List(ctx, store.Query{}); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a cancelled context = %v, want context.Canceled", err)
	}
	if err := a.Delete(ctx, "cancelled#000"); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete with a cancelled context = %v, want context.Canceled", err)
	}
	h.mustGet(t, "cancelled#000")
}

// testDelete deletes whatever a record holds, without a token: a live
// claim (which another caller can then acquire at once) and a completed
// record; a missing key is ErrNotFound.
func testDelete(t *testing.T, h *harness, a store.Admin) {
	held := h.claim("delete#held", time.Hour)
	h.mustAcquire(t, held, h.t0)
	done := h.claim("delete#done", time.Minute)
	h.mustAcquire(t, done, h.t0)
	h.mustComplete(t, done, []byte(`"ok"`))
	other := h.claim("delete#other", time.Minute)
	h.mustAcquire(t, other, h.t0)
	for _, k := range []string{held.Key, done.Key} {
		if err := a.Delete(h.ctx, k); err != nil {
			t.Fatalf("Delete(%q) = %v", k, err)
		}
		if _, err := h.s.Get(h.ctx, k); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after Delete(%q), Get = %v, want ErrNotFound", k, err)
		}
		if err := a.Delete(h.ctx, k); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("second Delete(%q) = %v, want ErrNotFound", k, err)
		}
	}
	if err := a.Delete(h.ctx, "delete#never"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Delete of a missing key = %v, want ErrNotFound", err)
	}
	h.mustAcquire(t, h.claim(held.Key, time.Minute), h.t0.Add(time.Second))
	if d := sameRecord(h.mustGet(t, other.Key), other); d != "" {
		t.Errorf("deleting other keys changed %q: %s", other.Key, d)
	}
	if err := h.s.Release(h.ctx, held.Key, held.Token); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("the deleted holder's Release = %v, want ErrTokenMismatch", err)
	}
}
