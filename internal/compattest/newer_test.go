package compattest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
)

// TestNewerFormat is what a build meets during a rolling deploy once a
// newer release writes a newer format: the records of every scenario, as
// the current code writes them, marked with format FormatVersion+1. No
// function runs and nothing is replayed, on any path (a call, a live
// claim, a crashed call's step, a batch, a transaction, HTTP, gRPC), and
// the error is a retryable store failure that names the formats and says
// to finish the deploy.
func TestNewerFormat(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			set := writeGolden(t, st.new(t))
			sp := st.new(t)
			for _, r := range set.Records {
				sp.write(t, r.Key, withFormat(t, st.name, r.Item, store.FormatVersion+1))
			}
			ctx := context.Background()
			e := newEnv(t, sp, sp.store, set.Clock.Add(10*time.Minute))
			newer := func(what string, err error) {
				t.Helper()
				var fe *store.FormatError
				switch {
				case !errors.Is(err, guard.ErrStore) || !errors.As(err, &fe):
					t.Errorf("%s over a record in a newer format = %v; want guard.ErrStore wrapping a *store.FormatError", what, err)
				case fe.Format != store.FormatVersion+1 || fe.Known != store.FormatVersion || !strings.Contains(err.Error(), "finish the deploy"):
					t.Errorf("%s: %v; want formats %d and %d named, and what to do", what, err, store.FormatVersion+1, store.FormatVersion)
				case errors.Is(err, store.ErrCorrupt), errors.Is(err, guard.ErrResultUnavailable):
					t.Errorf("%s: %v; a record of a newer format is neither corrupt nor unavailable", what, err)
				}
				var ae *temporal.ApplicationError
				if te := activity.TemporalError(err); !errors.As(te, &ae) || ae.NonRetryable() || ae.Type() != activity.ErrorTypeStore {
					t.Errorf("%s: as a Temporal error %v; want a retryable %s", what, te, activity.ErrorTypeStore)
				}
			}
			call := func(scope, id string, amount int) {
				t.Helper()
				_, _, err := adapt.Execute(ctx, e.g, scope, order{ID: id, Amount: amount}, func(context.Context) (receipt, error) {
					e.run(scope)
					return receipt{}, nil
				}, keyed...)
				newer(scope, err)
				if n := e.runs(scope); n != 0 {
					t.Errorf("%s: the function ran %d times over a record in a newer format", scope, n)
				}
			}
			call("golden-claim", "o-1", 100)
			call("golden-value", "o-2", 250)
			call("golden-error", "o-3", 300)
			call("golden-unavailable", "o-4", 400)
			call("golden-large", "o-5", 500)

			// The crashed call's claim lapsed: it is taken over, whatever its
			// format. Its step's record, of the newer format, is not replayed
			// and the step does not run.
			_, _, err := adapt.Execute(ctx, e.g, "golden-step", order{ID: "o-6", Amount: 600}, func(ctx context.Context) (receipt, error) {
				_, err := guard.Step(ctx, "reserve", func(context.Context) (receipt, error) {
					e.run("reserve")
					return receipt{}, nil
				})
				return receipt{}, err
			}, opts(guard.WithLease(time.Minute))...)
			newer("the step", err)
			if e.runs("reserve") != 0 {
				t.Error("the step ran over its record in a newer format")
			}

			// A batch: the bulk read reports the newer records, and their
			// claims fail item by item.
			res := guard.DoBatch(ctx, e.g, "golden-value", []order{{ID: "o-2", Amount: 250}}, func(context.Context, order) (receipt, error) {
				e.run("batch")
				return receipt{}, nil
			}, guard.WithKeyPath("id"), guard.WithPayloadValidation("amount"))
			newer("a batch item", res[0].Err)
			if e.runs("batch") != 0 {
				t.Error("a batch item ran over a record in a newer format")
			}

			if sp.execTx != nil {
				_, _, err := sp.execTx(ctx, e.g, "golden-tx", order{ID: "o-10", Amount: 1000}, func(context.Context) (receipt, error) {
					e.run("tx")
					return receipt{}, nil
				}, keyed...)
				newer("a transactional call", err)
				if e.runs("tx") != 0 {
					t.Error("a transactional call ran over a record in a newer format")
				}
			}

			rec := serveHTTP(ctx, e, func(w http.ResponseWriter, r *http.Request) { e.run("http") })
			if rec.Code != http.StatusServiceUnavailable || e.runs("http") != 0 {
				t.Errorf("HTTP over a record in a newer format: %d %s (%d runs); want 503 and no run", rec.Code, rec.Body, e.runs("http"))
			}
			_, err = callGRPC(ctx, e, "o-8", func(context.Context, any) (any, error) {
				e.run("grpc")
				return wrapperspb.String("again"), nil
			})
			if status.Code(err) != codes.Unavailable || e.runs("grpc") != 0 {
				t.Errorf("gRPC over a record in a newer format: %v (%d runs); want Unavailable and no run", err, e.runs("grpc"))
			}
		})
	}
}

// withFormat returns the item raw, of store storeName, marked as written
// in format.
func withFormat(t *testing.T, storeName string, raw json.RawMessage, format int) json.RawMessage {
	t.Helper()
	var out []byte
	var err error
	switch storeName {
	case "dynamodb":
		var item map[string]map[string]string
		if err = json.Unmarshal(raw, &item); err == nil {
			item["format"] = map[string]string{"N": strconv.Itoa(format)}
			out, err = json.Marshal(item)
		}
	case "redis":
		var it redisItem
		if err = json.Unmarshal(raw, &it); err == nil {
			it.Hash["format"] = blob(strconv.Itoa(format))
			out, err = json.Marshal(it)
		}
	case "postgres":
		var row map[string]any
		if err = json.Unmarshal(raw, &row); err == nil {
			row["format"] = format
			out, err = json.Marshal(row)
		}
	default:
		t.Fatalf("no format for store %q", storeName)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}
