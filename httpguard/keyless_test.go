package httpguard_test

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store/memory"
)

// stepping answers with what guard.Step returned inside it: 200 "ran" when
// the step ran its function, 500 with the error otherwise.
type stepping struct{}

func (stepping) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v, err := guard.Step(r.Context(), "charge", func(context.Context) (string, error) { return "ran", nil })
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Write([]byte(v))
}

// A request without a key that may go without one runs as an unguarded
// call, as a disabled guard's requests do: a step in its handler runs its
// function unguarded instead of failing with adapt.ErrNotInCall, and the
// guard's span and the server span both label it unguarded.
func TestKeyOptionalRunsAsAnUnguardedCall(t *testing.T) {
	tr := teststores.NewTracing(t)
	g := newGuard(t, memory.New(), guard.WithTracerProvider(tr.Provider))
	mw, err := httpguard.Middleware(g, httpguard.WithKeyOptional())
	if err != nil {
		t.Fatal(err)
	}
	srv := serveRaw(t, otelhttp.NewHandler(mw(stepping{}), "POST /payments", otelhttp.WithTracerProvider(tr.Provider)))
	for range 2 {
		tr.Reset()
		r := post(t, srv.Client(), srv.URL+"/payments", "", "x")
		if r.status != http.StatusOK || string(r.body) != "ran" || r.header.Get("Idempotency-Key-Status") != "" {
			t.Fatalf("keyless request: %d %q %v, want 200 \"ran\" without idempotency headers", r.status, r.body, r.header)
		}
		server, execute := tr.Spans(t)
		teststores.CheckNested(t, server, execute, "unguarded")
	}
}
