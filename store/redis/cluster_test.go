package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/storetest"
)

// clusterClientName names the connections of the Cluster client, for
// the watch probe.
const clusterClientName = "storetest-cluster"

// startCluster starts a Redis Cluster of three masters of the test's own,
// each owning a third of the slots, and returns a Cluster client for it.
func startCluster(t *testing.T) *goredis.ClusterClient {
	t.Helper()
	ctx := context.Background()
	up := func(c *goredis.Client) bool { return c.Ping(ctx).Err() == nil }
	var nodes []*goredis.Client
	for range 3 {
		c, _ := startServer(t, up, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		nodes = append(nodes, c)
	}
	const slots = 16384
	for i, c := range nodes {
		lo, hi := i*slots/len(nodes), (i+1)*slots/len(nodes)-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
		}
	}
	for _, c := range nodes[1:] {
		host, port, _ := strings.Cut(nodes[0].Options().Addr, ":")
		if err := c.ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatalf("CLUSTER MEET: %v", err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		ok := true
		for _, c := range nodes {
			info, err := c.ClusterInfo(ctx).Result()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3")
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not form within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{nodes[0].Options().Addr}, ClientName: clusterClientName})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestCluster runs the conformance suite, the Admin listing across masters
// included, against a three-master Cluster: every script touches one key,
// so it runs on the key's node without hash tags; GetMany's pipeline is
// split by node by the client.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	cc := startCluster(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		return redistest.NewStore(t, cc)
	}, storetest.WithWatchProbe(watchProbe(cc, clusterClientName)))

	// The keys of one store do spread over the masters.
	s := redistest.NewStore(t, cc)
	ctx := context.Background()
	t0 := time.Now().Add(time.Hour)
	for i := range 30 {
		rec := &store.Record{Key: fmt.Sprintf("spread#%d", i), Status: store.StatusInProgress, Token: "t", ExpiresAt: t0.Add(time.Hour)}
		if _, err := s.Acquire(ctx, rec, t0); err != nil {
			t.Fatal(err)
		}
	}
	var holding atomic.Int32 // ForEachMaster calls concurrently
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		n, err := c.DBSize(ctx).Result()
		if n > 0 {
			holding.Add(1)
		}
		return err
	})
	if err != nil || holding.Load() != 3 {
		t.Errorf("%d of 3 masters hold keys (%v); want all 3", holding.Load(), err)
	}
}
