package redis_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	idemredis "github.com/idemguard/idemguard/store/redis"
)

// shaHook records the SHA-1 of every EVALSHA a client sends.
type shaHook struct {
	mu   sync.Mutex
	shas []string
}

func (h *shaHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *shaHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if args := cmd.Args(); strings.EqualFold(cmd.Name(), "evalsha") && len(args) > 1 {
			h.mu.Lock()
			h.shas = append(h.shas, args[1].(string))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *shaHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h *shaHook) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.shas
	h.shas = nil
	return s
}

// Scripts returns the sources whose SHA-1 the store sends: each operation
// runs the script of its name, so a caller who loads or sends them by hand
// sends what the store sends.
func TestScripts(t *testing.T) {
	f := newFixture(t)
	h := &shaHook{}
	f.client.AddHook(h)
	sources := idemredis.Scripts()
	if len(sources) != 4 {
		t.Fatalf("Scripts() has %d scripts, want 4", len(sources))
	}
	sha := func(name string) string {
		src, ok := sources[name]
		if !ok {
			t.Fatalf("Scripts() has no %q", name)
		}
		sum := sha1.Sum([]byte(src))
		return hex.EncodeToString(sum[:])
	}
	rec := f.claim("scope#scripts")
	for _, step := range []struct {
		name string
		call func() error
	}{
		{"acquire", func() error { _, err := f.s.Acquire(f.ctx, rec, f.t0); return err }},
		{"extend", func() error {
			return f.s.Extend(f.ctx, rec.Key, rec.Token, f.t0.Add(2*time.Minute), f.t0.Add(time.Hour))
		}},
		{"release", func() error { return f.s.Release(f.ctx, rec.Key, rec.Token) }},
		{"acquire", func() error { _, err := f.s.Acquire(f.ctx, rec, f.t0); return err }},
		{"complete", func() error {
			done := *rec
			done.Result = []byte(`"ok"`)
			return f.s.Complete(f.ctx, &done)
		}},
	} {
		h.take()
		if err := step.call(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got, want := h.take(), sha(step.name); len(got) != 1 || got[0] != want {
			t.Errorf("%s sent EVALSHA %v; want the SHA-1 of Scripts()[%q], %s", step.name, got, step.name, want)
		}
	}
	sources["acquire"] = "changed"
	if idemredis.Scripts()["acquire"] == "changed" {
		t.Error("Scripts() returned the store's own map; want a copy")
	}
}
