package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
)

// releaseStores are the stores the release cases run against: the memory
// store, and each server's.
var releaseStores = append([]struct {
	name string
	open func(t *testing.T) e2eStore
}{{"memory", func(*testing.T) e2eStore { return e2eStore{s: memory.New()} }}}, e2eStores...)

// The window between reading a stuck claim and deleting it: whatever
// happens to the claim there, release deletes only a claim that is still
// lapsed when it writes.
func TestReleaseStuckWindow(t *testing.T) {
	for _, st := range releaseStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			testReleaseStuckWindow(t, st.open(t).s)
		})
	}
}

func testReleaseStuckWindow(t *testing.T, s store.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now()
	// stuck stores a claim whose lease lapsed a minute ago, and returns it
	// as the operator read it.
	stuck := func(key, token string) *store.Record {
		t.Helper()
		r := &store.Record{Key: key, Status: store.StatusInProgress, Token: token,
			ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(-time.Minute)}
		if _, err := s.Acquire(ctx, r, now.Add(-2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		return r
	}
	refused := func(err error, want string) {
		t.Helper()
		var ref *refusal
		if !errors.As(err, &ref) || !strings.Contains(ref.reason, want) {
			t.Errorf("releaseStuck = %v; want a refusal saying %q", err, want)
		}
	}
	get := func(key string) *store.Record {
		t.Helper()
		r, err := s.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get(%s) = %v", key, err)
		}
		return r
	}

	// Renewed by its holder after the read, under the same token.
	read := stuck("w#renewed", "holder-1")
	if err := s.Extend(ctx, read.Key, read.Token, now.Add(time.Hour), now.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	refused(releaseStuck(ctx, s, read, now, now), "renewed by its holder meanwhile")
	if r := get(read.Key); r.Token != "holder-1" || r.Status != store.StatusInProgress {
		t.Errorf("the renewed claim became %+v", r)
	}
	// A delete conditional on the token read (Store.Release) would have
	// deleted it: the reason releaseStuck takes the claim over instead.
	if err := s.Release(ctx, read.Key, read.Token); err != nil {
		t.Errorf("control: Release(token read) of the renewed claim = %v; the store kept it", err)
	}

	// Completed by its holder after the read.
	read = stuck("w#completed", "holder-2")
	done := *read
	done.Status, done.Result, done.LeaseExpiresAt = store.StatusCompleted, []byte(`1`), time.Time{}
	if err := s.Complete(ctx, &done); err != nil {
		t.Fatal(err)
	}
	refused(releaseStuck(ctx, s, read, now, now), "completed meanwhile")
	if r := get(read.Key); r.Status != store.StatusCompleted {
		t.Errorf("the completed record became %+v", r)
	}

	// Taken over by a retry after the read.
	read = stuck("w#taken", "holder-3")
	retry := &store.Record{Key: read.Key, Status: store.StatusInProgress, Token: "retry-3",
		ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
	if _, err := s.Acquire(ctx, retry, now); err != nil {
		t.Fatal(err)
	}
	refused(releaseStuck(ctx, s, read, now, now), "claimed by another caller meanwhile")
	if r := get(read.Key); r.Token != "retry-3" {
		t.Errorf("the retry's claim became %+v", r)
	}

	// Still stuck: released, the key is free, the old holder is fenced.
	read = stuck("w#stuck", "holder-4")
	if err := releaseStuck(ctx, s, read, now, now); err != nil {
		t.Fatalf("releaseStuck of a stuck claim = %v", err)
	}
	if _, err := s.Get(ctx, read.Key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after release, Get = %v; want ErrNotFound", err)
	}
	if err := s.Extend(ctx, read.Key, read.Token, now.Add(time.Hour), now.Add(2*time.Hour)); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("the released holder's Extend = %v; want ErrTokenMismatch", err)
	}

	// Refused up front: a live claim, a claim without a lease, a
	// completed record.
	live := &store.Record{Key: "w#live", Status: store.StatusInProgress, Token: "holder-5",
		ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(time.Minute)}
	refused(releaseStuck(ctx, s, live, now, now), "is held: lease in ")
	noLease := &store.Record{Key: "w#no-lease", Status: store.StatusInProgress, Token: "holder-6", ExpiresAt: now.Add(time.Hour)}
	refused(releaseStuck(ctx, s, noLease, now, now), "claimed without a lease")
	refused(releaseStuck(ctx, s, &done, now, now), "not a stuck claim")
}

// release with a clock skew beyond the Redis store's expiry grace (a
// minute): the stuck claim is released and release says so.
func TestReleaseLargeSkew(t *testing.T) {
	for _, st := range e2eStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			f := st.open(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			now := time.Now()
			key := "charge#skewed"
			stuck := &store.Record{Key: key, Status: store.StatusInProgress, Token: "holder-skew",
				ExpiresAt: now.Add(time.Hour), LeaseExpiresAt: now.Add(-10 * time.Minute)}
			if _, err := f.s.Acquire(ctx, stuck, now.Add(-20*time.Minute)); err != nil {
				t.Fatal(err)
			}
			r := cli(t, []string{StoreEnv + "=" + f.url}, "", "release", key, "--clock-skew", "5m")
			if r.code != exitOK || !strings.Contains(r.stdout, "released: deleted the stuck claim") {
				t.Errorf("release --clock-skew 5m: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			if _, err := f.s.Get(ctx, key); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("after release, Get = %v; want ErrNotFound", err)
			}
		})
	}
}
