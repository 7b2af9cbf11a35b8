package guard_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
)

// A batch resumed by a guard rotating its key secret finds the items
// before its resume point under the previous secrets, as every other path
// looks a key up, with the bulk lookup and without it, with payload
// validation on, and past their TTL. Before, it looked under the new
// secret only and failed every done item with ErrResultUnavailable.
func TestDoBatchResumeUnderPreviousSecret(t *testing.T) {
	old, next := []byte("old secret"), []byte("new secret")
	for _, lookup := range []bool{true, false} {
		t.Run(fmt.Sprint("lookup=", lookup), func(t *testing.T) {
			clock := newFakeClock()
			s := newBulk()
			var st store.Store = s
			if !lookup {
				st = s.countingStore // no BatchGetter: one read per item
			}
			opts := []guard.Option{guard.WithKeyPath("id"), guard.WithPayloadValidation("amount"), adapt.WithClock(clock), guard.WithTTL(time.Hour)}
			before := mustGuard(t, st, append(opts, guard.WithKeySecret(old))...)
			after := mustGuard(t, st, append(opts, guard.WithKeySecret(next, old))...)
			in := orders(6)
			var e effects
			// An earlier attempt, under the old secret, completed items 0-3;
			// the checkpoint says 3.
			checkResults(t, in[:4], guard.DoBatch(t.Context(), before, "charge", in[:4], batchCharge(&e)), always(guard.OutcomeExecuted))
			clock.Advance(2 * time.Hour) // past their TTL: a resumed item replays all the same

			res := guard.DoBatch(t.Context(), after, "charge", in, batchCharge(&e), adapt.WithResume(3))
			checkResults(t, in, res, func(i int) guard.Outcome {
				if i < 3 {
					return guard.OutcomeReplayed
				}
				return guard.OutcomeExecuted
			})
			if n := e.total(); n != 4+3 {
				t.Errorf("%d side effects; want the first attempt's 4 and the 3 past the resume point", n)
			}

			// Another payload under a done item's key is still refused.
			changed := append([]order(nil), in...)
			changed[0].Amount = 1000
			res = guard.DoBatch(t.Context(), mustGuard(t, st, append(opts, guard.WithKeySecret(next, old))...), "charge", changed[:1], batchCharge(&e), adapt.WithResume(1))
			if !errors.Is(res[0].Err, guard.ErrPayloadMismatch) {
				t.Errorf("a done item with another payload = %v, %v; want ErrPayloadMismatch", res[0].Outcome, res[0].Err)
			}
		})
	}
}
