package httpguard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/teststores"
)

// An HTTP handler behind the middleware joins the composition suite on
// every store: a guard.Step inside it, a 503 after the step (released),
// a key reused with another body (422), a paused holder taken over.
func TestCompositionHTTP(t *testing.T) {
	guardtest.RunComposition(t, guardtest.EntryPoint{
		Name: "httpguard",
		Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
			h := httpguard.Middleware(g)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				v, err := body(r.Context(), effect)
				if err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, v)
			}))
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader(call.Payload))
			req.Header.Set("Idempotency-Key", call.Key)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				return "", fmt.Errorf("%d %s", rec.Code, strings.TrimSpace(rec.Body.String()))
			}
			return rec.Body.String(), nil
		},
	}, teststores.All())
}
