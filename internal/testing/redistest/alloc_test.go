package redistest

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/reqcount"
)

func TestHookAllocs(t *testing.T) {
	h := counter{&reqcount.Counter{}}
	ctx := context.Background()
	cmd := goredis.NewCmd(ctx, "evalsha", "x", 1, "k")
	p := h.ProcessHook(func(context.Context, goredis.Cmder) error { return nil })
	pp := h.ProcessPipelineHook(func(context.Context, []goredis.Cmder) error { return nil })
	cmds := []goredis.Cmder{cmd, goredis.NewCmd(ctx, "hgetall", "k")}
	if n := testing.AllocsPerRun(1000, func() { p(ctx, cmd) }); n != 0 {
		t.Errorf("process hook allocates %v per command", n)
	}
	if n := testing.AllocsPerRun(1000, func() { pp(ctx, cmds) }); n != 0 {
		t.Errorf("pipeline hook allocates %v per pipeline", n)
	}
}
