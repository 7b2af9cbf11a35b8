package httpguard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/guard/guardtest"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/internal/testing/teststores"
)

// An HTTP handler behind the middleware joins the composition suite on
// every store: a guard.Step inside it, a 503 after the step (released),
// a key reused with another body (422), a duplicate while the first runs
// (409, or the first's response after waiting), paused holders taken over
// (the zombie's response served without Idempotency-Key-Status: not
// recorded), and the disabled guard's pass-through.
func TestCompositionHTTP(t *testing.T) {
	guardtest.RunComposition(t, guardtest.EntryPoint{
		Name: "httpguard",
		Run: func(ctx context.Context, t *testing.T, g *guard.Guard, call guardtest.Call, effect guardtest.Effect, body guardtest.Body) (string, error) {
			h := httpguard.MustMiddleware(g)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				v, err := body(r.Context(), effect)
				switch {
				case errors.Is(err, guard.ErrPayloadMismatch):
					// A step refused the key reused: the handler answers
					// as the middleware does.
					http.Error(w, err.Error(), http.StatusUnprocessableEntity)
					return
				case err != nil:
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
			answer := fmt.Sprintf("%d %s", rec.Code, strings.TrimSpace(rec.Body.String()))
			switch status := rec.Header().Get("Idempotency-Key-Status"); {
			case rec.Code == http.StatusConflict:
				return "", fmt.Errorf("%s: %w", answer, guard.ErrInProgress)
			case rec.Code == http.StatusUnprocessableEntity:
				return "", fmt.Errorf("%s: %w", answer, guard.ErrPayloadMismatch)
			case rec.Code != http.StatusCreated:
				return "", errors.New(answer)
			case status == "" && !g.Disabled():
				// Served, but not recorded: its claim was taken over.
				return "", fmt.Errorf("%s, not recorded: %w", answer, guard.ErrLeaseLost)
			}
			return rec.Body.String(), nil
		},
	}, teststores.All())
}
