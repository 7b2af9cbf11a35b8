package guard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/internal/testing/reqcount"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store"
)

// Execute reports the true outcome on every path, on every store: a call
// whose key was released says released, whatever released it, and the
// store holds what the outcome says (a completed record, or none).
func TestOutcomes(t *testing.T) {
	teststores.Each(t, func(t *testing.T, s store.Store, _ *reqcount.Counter) {
		g := mustGuard(t, s, guard.WithKeyPath("id"))
		type in struct {
			ID string `json:"id,omitempty"`
		}
		runs := map[string]int{}
		var mu sync.Mutex
		value := func(id string) func(context.Context) (int, error) {
			return func(context.Context) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				runs[id]++
				return runs[id], nil
			}
		}
		// check runs a call of id, and checks its outcome, error, the
		// function's runs so far and whether the store holds a completed
		// record of id afterwards.
		check := func(what, id string, fn func(context.Context) (int, error), want guard.Outcome, wantErr bool, wantRuns int, recorded bool, opts ...guard.CallOption) {
			t.Helper()
			_, out, err := adapt.Execute(ctx, g, "outcomes", in{id}, fn, opts...)
			if n := runsOf(&mu, runs, id); out != want || (err != nil) != wantErr || n != wantRuns {
				t.Errorf("%s: %v, %v after %d runs; want %v, error %v, %d runs", what, out, err, n, want, wantErr, wantRuns)
			}
			if id == "" {
				return
			}
			key, _, _ := g.Key("outcomes", in{id})
			rec, gerr := s.Get(ctx, key)
			switch {
			case recorded && (gerr != nil || rec.Status != store.StatusCompleted):
				t.Errorf("%s: record %+v, %v; want it completed", what, rec, gerr)
			case !recorded && !errors.Is(gerr, store.ErrNotFound):
				t.Errorf("%s: record %+v, %v; want none: the key was released", what, rec, gerr)
			}
		}
		failing := func(id string) func(context.Context) (int, error) {
			return func(ctx context.Context) (int, error) {
				_, _ = value(id)(ctx)
				return 0, errors.New("connection reset")
			}
		}

		check("executed", "a", value("a"), guard.OutcomeExecuted, false, 1, true)
		check("replayed", "a", value("a"), guard.OutcomeReplayed, false, 1, true)
		check("definite error", "b", func(ctx context.Context) (int, error) {
			_, _ = value("b")(ctx)
			return 0, guard.Definite(errors.New("declined"))
		}, guard.OutcomeExecuted, true, 1, true)
		check("definite error replayed", "b", value("b"), guard.OutcomeReplayed, true, 1, true)
		check("unguarded: empty key", "", value(""), guard.OutcomeUnguarded, false, 1, false)

		check("released: error", "c", failing("c"), guard.OutcomeReleased, true, 1, false)
		check("released: error, then run again", "c", value("c"), guard.OutcomeExecuted, false, 2, true)

		refuse := guard.WithResultFilter(func(any) bool { return false })
		check("released: result filter", "d", value("d"), guard.OutcomeReleased, false, 1, false, refuse)
		check("released: result filter, then run again", "d", value("d"), guard.OutcomeExecuted, false, 2, true)

		// The call's filter releases the call and its step: the next call
		// runs the step again.
		withStep := func(id string) func(context.Context) (int, error) {
			return func(ctx context.Context) (int, error) { return guard.Step(ctx, "quote", value(id)) }
		}
		check("released: result filter, with a step", "e", withStep("e"), guard.OutcomeReleased, false, 1, false, refuse)
		check("released: result filter, the step run again", "e", withStep("e"), guard.OutcomeExecuted, false, 2, true)

		// ... and the steps it replayed from an earlier attempt, retired by
		// completing their records again as expired, which every store
		// must allow under the record's token.
		failOnce := true
		replayedStep := func(ctx context.Context) (int, error) {
			n, err := guard.Step(ctx, "quote", value("i"))
			if err == nil && failOnce {
				failOnce = false
				err = errors.New("mailer down")
			}
			return n, err
		}
		check("released: error after a step", "i", replayedStep, guard.OutcomeReleased, true, 1, false)
		check("released: result filter, with a replayed step", "i", replayedStep, guard.OutcomeReleased, false, 1, false, refuse)
		check("executed: the replayed step run again", "i", replayedStep, guard.OutcomeExecuted, false, 2, true)

		// A step's own filter releases the step: the call that failed after
		// it is released, and its retry runs the step again.
		fail := true
		stepRefused := func(ctx context.Context) (int, error) {
			n, err := guard.Step(ctx, "quote", value("f"), refuse)
			if err == nil && fail {
				fail = false
				err = errors.New("mailer down")
			}
			return n, err
		}
		check("released: error after a step's filter", "f", stepRefused, guard.OutcomeReleased, true, 1, false)
		check("executed: the refused step run again", "f", stepRefused, guard.OutcomeExecuted, false, 2, true)

		// A concurrent call with the same key in this process shares the
		// running call's outcome.
		key, _, _ := g.Key("outcomes", in{"g"})
		running, joined := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			check("executed: the leader", "g", func(ctx context.Context) (int, error) {
				close(running)
				<-joined
				return value("g")(ctx)
			}, guard.OutcomeExecuted, false, 1, true)
		})
		var shared guard.Outcome
		var sharedErr error
		wg.Go(func() {
			<-running
			_, shared, sharedErr = adapt.Execute(ctx, g, "outcomes", in{"g"}, value("g"), guard.WithWait(time.Minute))
		})
		waitFor(t, "the follower to join", func() bool { return g.Joined(key) == 1 })
		close(joined)
		wg.Wait()
		if n := runsOf(&mu, runs, "g"); shared != guard.OutcomeShared || sharedErr != nil || n != 1 {
			t.Errorf("follower = %v, %v after %d runs; want shared, 1 run", shared, sharedErr, n)
		}

		// A disabled guard runs every call unguarded.
		t.Setenv(adapt.DisableEnv, "true")
		g = mustGuard(t, s, guard.WithKeyPath("id"))
		check("unguarded: disabled", "h", value("h"), guard.OutcomeUnguarded, false, 1, false)
	})
}

func runsOf(mu *sync.Mutex, runs map[string]int, id string) int {
	mu.Lock()
	defer mu.Unlock()
	return runs[id]
}
