package dashboards_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/common/model"

	"github.com/idemguard/idemguard/dashboards"
	"github.com/idemguard/idemguard/dashboards/internal/expo"
	"github.com/idemguard/idemguard/dashboards/internal/promeval"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store/memory"
)

// scrapeEvery is the simulated scrape and rule-evaluation interval of the
// alert scenarios.
const scrapeEvery = 15 * time.Second

// rig is the traffic of an alert scenario: guards of one "service" that
// record with the same meter provider.
type rig struct {
	// On the real clock, over one store: a holder, duplicates in Reject
	// mode, and a duplicate in Wait mode.
	plain, rejecting, waiting *guard.Guard
	// On a fake clock, over a store of their own: a holder that dies
	// holding its claim, and the caller that takes the claim over once
	// its lease has lapsed.
	clock       fakeClock
	dead, taker *guard.Guard
	seq         int
}

type fakeClock struct{ *clockwork.FakeClock }

func (c fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	return c.FakeClock.AfterFunc(d, f).Stop
}

func newRig(t *testing.T, e *expo.Endpoint) *rig {
	t.Helper()
	base := []guard.Option{guard.WithMeterProvider(e.Provider), guard.WithLogger(slog.New(slog.DiscardHandler))}
	r := &rig{clock: fakeClock{clockwork.NewFakeClockAt(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))}}
	mk := func(s *memory.Store, o ...guard.Option) *guard.Guard {
		g, err := guard.New(s, append(slices.Clone(base), o...)...)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	live, lapsing := memory.New(), memory.New()
	r.plain = mk(live)
	r.rejecting = mk(live, guard.WithWait(0))
	r.waiting = mk(live, guard.WithWait(5*time.Second), adapt.WithWaitBackoff(time.Millisecond, 4*time.Millisecond))
	lease := guard.WithLease(30 * time.Second)
	r.dead = mk(lapsing, adapt.WithClock(r.clock), lease)
	r.taker = mk(lapsing, adapt.WithClock(r.clock), lease)
	return r
}

func (r *rig) key(prefix string) string {
	r.seq++
	return fmt.Sprintf("%s-%06d", prefix, r.seq)
}

// calls runs n ordinary calls of scope, each with a fresh key.
func (r *rig) calls(ctx context.Context, scope string, n int) error {
	for range n {
		if _, out, err := adapt.Execute(ctx, r.plain, scope, r.key(scope), func(context.Context) (int, error) { return 1, nil }); out != guard.OutcomeExecuted {
			return fmt.Errorf("an ordinary call: %v, %v", out, err)
		}
	}
	return nil
}

// contention: while a call of scope holds its key and runs, duplicates
// meet it alive: two are turned away (ErrInProgress), one waits and gets
// the holder's result.
func (r *rig) contention(ctx context.Context, scope string) error {
	key := r.key(scope)
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := guard.Do(ctx, r.plain, scope, key, func(context.Context) (int, error) { close(inside); <-release; return 1, nil })
		done <- err
	}()
	<-inside
	var err error
	for range 2 {
		if _, derr := guard.Do(ctx, r.rejecting, scope, key, func(context.Context) (int, error) { return 2, nil }); !errors.Is(derr, guard.ErrInProgress) {
			err = errors.Join(err, fmt.Errorf("a duplicate of a running call: %v, want ErrInProgress", derr))
		}
	}
	time.AfterFunc(5*time.Millisecond, func() { close(release) })
	if _, out, werr := adapt.Execute(ctx, r.waiting, scope, key, func(context.Context) (int, error) { return 3, nil }); out != guard.OutcomeReplayed {
		err = errors.Join(err, fmt.Errorf("a waiting duplicate: %v, %v; want replayed", out, werr))
	}
	return errors.Join(err, <-done)
}

// stuck: a call of scope dies holding its claim; once the lease has
// lapsed, the next call with the key takes the claim over and runs.
func (r *rig) stuck(ctx context.Context, scope string) error {
	key := r.key(scope)
	if cl, _, err := adapt.Obtain(ctx, r.dead, scope, key); err != nil || cl == nil {
		return fmt.Errorf("a claim: %v, %v", cl, err)
	}
	r.clock.Advance(45 * time.Second) // past the lease and the clock skew
	if _, out, err := adapt.Execute(ctx, r.taker, scope, key, func(context.Context) (int, error) { return 1, nil }); out != guard.OutcomeExecuted {
		return fmt.Errorf("a call after its key's holder died: %v, %v; want executed", out, err)
	}
	return nil
}

// fired runs round once per simulated scrape interval for rounds rounds,
// scraping after each, and evaluates every alert rule at every scrape as
// Prometheus evaluates rules: an alert fires once its expression has
// returned its series at every evaluation for the rule's For. It returns
// the alerts that fired, by name, with the scope labels they fired for.
func fired(t *testing.T, rounds int, round func(ctx context.Context, r *rig) error) map[string][]string {
	t.Helper()
	ctx := context.Background()
	e, err := expo.New()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	db, err := promeval.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := newRig(t, e)
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for i := range rounds {
		if err := round(ctx, r); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		text, err := e.Scrape(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Append(ctx, text, start.Add(time.Duration(i)*scrapeEvery)); err != nil {
			t.Fatal(err)
		}
	}
	m := dashboards.DefaultMetrics()
	out := map[string][]string{}
	for _, a := range dashboards.Alerts(m) {
		hold, err := model.ParseDuration(a.For)
		if err != nil {
			t.Fatalf("%s: for %q: %v", a.Name, a.For, err)
		}
		active := map[string]time.Time{}
		firing := map[string]bool{}
		for i := range rounds {
			at := start.Add(time.Duration(i) * scrapeEvery)
			v, err := db.Instant(ctx, a.Expr, at)
			if err != nil {
				t.Fatalf("%s: %v", a.Name, err)
			}
			seen := map[string]bool{}
			for _, s := range v {
				id := s.Metric.Get(m.Scope)
				if id == "" {
					id = s.Metric.String()
				}
				seen[id] = true
				since, ok := active[id]
				if !ok {
					active[id], since = at, at
				}
				if at.Sub(since) >= time.Duration(hold) {
					firing[id] = true
				}
			}
			for id := range active {
				if !seen[id] {
					delete(active, id)
				}
			}
		}
		for id := range firing {
			out[a.Name] = append(out[a.Name], id)
		}
		sort.Strings(out[a.Name])
	}
	return out
}

// alertNamed returns the alert rule called name.
func alertNamed(t *testing.T, name string) dashboards.Alert {
	t.Helper()
	for _, a := range dashboards.Alerts(dashboards.DefaultMetrics()) {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no alert %s", name)
	return dashboards.Alert{}
}

// rounds of the alert scenarios: 35 simulated minutes, enough for a
// 15-minute window to fill and a 15-minute For to pass.
const alertRounds = 140

// Live contention — duplicates meeting a running holder, turned away in
// progress or waiting — fires the contention warning for its scope, and
// not the stuck-claims alert: nothing was stuck.
func TestAlertsContentionIsNotStuck(t *testing.T) {
	got := fired(t, alertRounds, func(ctx context.Context, r *rig) error {
		if err := r.calls(ctx, "ship", 4); err != nil {
			return err
		}
		return r.contention(ctx, "ship")
	})
	t.Logf("fired: %v", got)
	if a := alertNamed(t, "IdemguardContention"); a.Severity != "warning" {
		t.Errorf("IdemguardContention has severity %s, want warning", a.Severity)
	}
	if !slices.Equal(got["IdemguardContention"], []string{"ship"}) {
		t.Errorf("IdemguardContention fired for %v under live contention in scope ship, want [ship]", got["IdemguardContention"])
	}
	for _, name := range []string{"IdemguardClaimsStuck", "IdemguardLeaseLost", "IdemguardStoreErrors"} {
		if len(got[name]) > 0 {
			t.Errorf("%s fired for %v under live contention only", name, got[name])
		}
	}
}

// Claims left by holders that died, taken over once their leases lapsed,
// fire the stuck-claims alert for their scope, and not the contention
// warning: no duplicate met a live holder.
func TestAlertsStuckClaimsAreNotContention(t *testing.T) {
	n := 0
	got := fired(t, alertRounds, func(ctx context.Context, r *rig) error {
		if err := r.calls(ctx, "export", 4); err != nil {
			return err
		}
		if n++; n%8 != 0 { // a crash every two minutes
			return nil
		}
		return r.stuck(ctx, "export")
	})
	t.Logf("fired: %v", got)
	if !slices.Equal(got["IdemguardClaimsStuck"], []string{"export"}) {
		t.Errorf("IdemguardClaimsStuck fired for %v when claims of scope export were taken over after their holders died, want [export]", got["IdemguardClaimsStuck"])
	}
	for _, name := range []string{"IdemguardContention", "IdemguardLeaseLost"} {
		if len(got[name]) > 0 {
			t.Errorf("%s fired for %v when only stuck claims were taken over", name, got[name])
		}
	}
	if a := alertNamed(t, "IdemguardClaimsStuck"); !strings.Contains(a.Runbook, "idemguard list --scope SCOPE --stuck") {
		t.Errorf("the stuck-claims runbook does not list the scope's stuck claims:\n%s", a.Runbook)
	}
}
