package workflow_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	tworkflow "go.temporal.io/sdk/workflow"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/internal/testing/temporaltest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/workflow"
)

// heldInput is the input of benchHold: a key, and how long the holder's
// body sleeps on a workflow timer.
type heldInput struct {
	Key  string        `json:"key"`
	Hold time.Duration `json:"hold,omitempty"`
}

// benchHold is the guarded workflow of BenchmarkDuplicateAfterCompletion.
func benchHold(ctx tworkflow.Context, in heldInput) (string, error) {
	if in.Hold > 0 {
		if err := tworkflow.Sleep(ctx, in.Hold); err != nil {
			return "", err
		}
	}
	return in.Key, nil
}

// BenchmarkDuplicateAfterCompletion measures how long after its holder
// closes a duplicate workflow of the same key closes (the server's
// timestamps of the two WorkflowExecutionCompleted events), with the
// defaults of workflow.Wrap: per store, holders that sleep 2 s, 10 s and
// 30 s (each for 4 pairs, at 1, 1.125, 1.25 and 1.375 times that, so that
// the completions fall at several points of the duplicate's waiting), all
// at once; the duplicate starts once its holder holds the key. Reported:
// the median and the longest latency, and the events in a duplicate's
// history. Against the servers of scripts/harness.sh, once:
//
//	IDEMGUARD_SERVICES="temporal redis postgres" scripts/harness.sh run \
//	  go test -run '^$' -bench DuplicateAfterCompletion -benchtime 1x ./workflow/
func BenchmarkDuplicateAfterCompletion(b *testing.B) {
	c := temporaltest.Client(b, client.Options{})
	for _, st := range []struct {
		name string
		make func(b *testing.B) store.Store
	}{
		{"memory", func(b *testing.B) store.Store { return memory.New() }},
		{"redis", func(b *testing.B) store.Store { return redistest.NewStore(b, redistest.NewClient(b)) }},
		{"postgres", func(b *testing.B) store.Store { return postgrestest.NewStore(b, postgrestest.NewPool(b)) }},
	} {
		b.Run(st.name, func(b *testing.B) {
			g, err := guard.New(st.make(b))
			if err != nil {
				b.Fatal(err)
			}
			tq := temporaltest.Name(b, "tq")
			guarded := workflow.MustWrap(g, benchHold, workflow.WithGuardOptions(guard.WithKeyPath("key")))
			temporaltest.Worker(b, c, tq, worker.Options{}, func(r worker.Registry) { workflow.Register(r, benchHold, guarded) })
			for b.Loop() {
				var (
					mu     sync.Mutex
					lat    = map[time.Duration][]time.Duration{}
					events []int
					wg     sync.WaitGroup
				)
				for _, base := range []time.Duration{2 * time.Second, 10 * time.Second, 30 * time.Second} {
					for i := range 4 {
						wg.Go(func() {
							d, ev := holdAndDuplicate(b, c, tq, base+time.Duration(i)*base/8)
							mu.Lock()
							defer mu.Unlock()
							lat[base] = append(lat[base], d)
							events = append(events, ev)
						})
					}
				}
				wg.Wait()
				var all []time.Duration
				for base, ds := range lat {
					slices.Sort(ds)
					b.Logf("%s, holder %v: duplicate closed %v after it", st.name, base, ds)
					all = append(all, ds...)
				}
				slices.Sort(all)
				b.ReportMetric(float64(all[len(all)/2].Milliseconds()), "ms-p50")
				b.ReportMetric(float64(all[len(all)-1].Milliseconds()), "ms-max")
				n := 0
				for _, e := range events {
					n += e
				}
				b.ReportMetric(float64(n)/float64(len(events)), "events/duplicate")
			}
		})
	}
}

// holdAndDuplicate runs a holder of a fresh key that sleeps hold and a
// duplicate started once the holder holds the key, and returns how long
// after the holder the duplicate closed, and its history's length.
func holdAndDuplicate(b *testing.B, c client.Client, tq string, hold time.Duration) (time.Duration, int) {
	key := temporaltest.Name(b, "k")
	idA, idB := temporaltest.Name(b, "holder"), temporaltest.Name(b, "dup")
	runA := temporaltest.Start(b, c, client.StartWorkflowOptions{ID: idA, TaskQueue: tq}, "benchHold", heldInput{Key: key, Hold: hold})
	for deadline := time.Now().Add(time.Minute); temporaltest.Count(temporaltest.History(b, c, idA, ""), enumspb.EVENT_TYPE_MARKER_RECORDED) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Errorf("%s never claimed its key", idA)
			return 0, 0
		}
	}
	runB := temporaltest.Start(b, c, client.StartWorkflowOptions{ID: idB, TaskQueue: tq}, "benchHold", heldInput{Key: key})
	ctx, cancel := context.WithTimeout(context.Background(), hold+3*time.Minute)
	defer cancel()
	var a, r string
	if err := runA.Get(ctx, &a); err != nil {
		b.Errorf("holder: %v", err)
	}
	if err := runB.Get(ctx, &r); err != nil || r != key {
		b.Errorf("duplicate: %q, %v; want %q", r, err, key)
	}
	closed := func(id string) (time.Time, int) {
		h := temporaltest.History(b, c, id, "")
		for _, e := range h.Events {
			if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED {
				return e.GetEventTime().AsTime(), len(h.Events)
			}
		}
		b.Errorf("%s did not complete", id)
		return time.Time{}, len(h.Events)
	}
	ta, _ := closed(idA)
	tb, n := closed(idB)
	return tb.Sub(ta), n
}
