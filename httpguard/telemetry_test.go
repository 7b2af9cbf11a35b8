package httpguard_test

import (
	"net/http"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/testing/teststores"
	"github.com/idemguard/idemguard/store/memory"
)

// With otelhttp in front, the guard's span nests under the HTTP server
// span, and both tell a fresh response from a replay.
func TestSpansNestUnderOtelhttp(t *testing.T) {
	tr := teststores.NewTracing(t)
	g := newGuard(t, memory.New(), guard.WithTracerProvider(tr.Provider))
	h := otelhttp.NewHandler(httpguard.MustMiddleware(g)(&counting{}), "POST /payments", otelhttp.WithTracerProvider(tr.Provider))
	srv := serveRaw(t, h)
	for _, want := range []string{"executed", "replayed"} {
		tr.Reset()
		if r := post(t, srv.Client(), srv.URL+"/payments", "key-otel", "x"); r.status != http.StatusCreated {
			t.Fatalf("%d %s", r.status, r.body)
		}
		server, execute := tr.Spans(t)
		teststores.CheckNested(t, server, execute, want)
	}
}
