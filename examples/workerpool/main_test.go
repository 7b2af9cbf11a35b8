package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/testenv"
	"github.com/idemguard/idemguard/store/memory"
)

func TestWorkerPool(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, memory.New(), "memory", 120, 6); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkOutput(t, out.String(), "store: memory\n")
}

// The same with the two processes sharing the harness's redis-server, as
// go run does with IDEMGUARD_REDIS_ADDR set; the run's records are deleted
// afterwards.
func TestWorkerPoolRedis(t *testing.T) {
	addr := testenv.Require(t, redisAddrEnv, "redis-server")
	ctx := context.Background()
	s, desc, closeStore, err := openStore(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = run(ctx, &out, s, desc, 120, 6)
	closeStore()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkOutput(t, out.String(), "store: Redis at "+addr+" (IDEMGUARD_REDIS_ADDR), keys under \"idemguard-workerpool:")
	prefix := desc[strings.Index(desc, `"`)+1 : strings.LastIndex(desc, `"`)]
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	if keys, err := c.Keys(ctx, prefix+"*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("after the run: keys %v, %v under %s; want none", keys, err, prefix)
	}
}

func checkOutput(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range append(want, "effects = unique messages = 120", "0 duplicate effects", "died with") {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}
