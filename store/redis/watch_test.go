package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/internal/testing/redistest"
	"github.com/idemguard/idemguard/store"
	idemredis "github.com/idemguard/idemguard/store/redis"
	"github.com/idemguard/idemguard/store/storetest"
)

// watchClientName names the connections of a test's client, its
// subscriber connections included, so that the probe can find them.
func watchClientName() func(*goredis.Options) {
	var b [4]byte
	rand.Read(b[:])
	name := "storetest-" + hex.EncodeToString(b[:])
	return func(o *goredis.Options) { o.ClientName = name }
}

// masters returns the servers of client: itself, or a Cluster's masters.
func masters(t *testing.T, client goredis.UniversalClient) []*goredis.Client {
	t.Helper()
	cc, ok := client.(*goredis.ClusterClient)
	if !ok {
		return []*goredis.Client{client.(*goredis.Client)}
	}
	var mu sync.Mutex
	var nodes []*goredis.Client
	if err := cc.ForEachMaster(context.Background(), func(_ context.Context, n *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, n)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return nodes
}

// watchProbe counts a store's subscriptions with PUBSUB SHARDNUMSUB on the
// key's channel, and drops its subscriber connections with CLIENT KILL:
// the connections of the store's client that are subscribed to shard
// channels (ssub > 0), found in CLIENT LIST by the client's name.
func watchProbe(client goredis.UniversalClient, name string) storetest.WatchProbe {
	ctx := context.Background()
	return storetest.WatchProbe{
		Subscriptions: func(t *testing.T, s store.Store, key string) int {
			channel := s.(*idemredis.Store).Prefix() + key
			node := client
			if cc, ok := client.(*goredis.ClusterClient); ok {
				n, err := cc.MasterForKey(ctx, channel)
				if err != nil {
					t.Fatal(err)
				}
				node = n
			}
			m, err := node.PubSubShardNumSub(ctx, channel).Result()
			if err != nil {
				t.Fatalf("PUBSUB SHARDNUMSUB: %v", err)
			}
			return int(m[channel])
		},
		Drop: func(t *testing.T, _ store.Store) {
			killed := 0
			for _, n := range masters(t, client) {
				list, err := n.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
				if err != nil {
					t.Fatalf("CLIENT LIST: %v", err)
				}
				for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
					f := map[string]string{}
					for _, kv := range strings.Fields(line) {
						k, v, _ := strings.Cut(kv, "=")
						f[k] = v
					}
					if ssub, _ := strconv.Atoi(f["ssub"]); f["name"] != name || ssub == 0 {
						continue
					}
					if err := n.Do(ctx, "CLIENT", "KILL", "ID", f["id"]).Err(); err != nil {
						t.Fatalf("CLIENT KILL ID %s: %v", f["id"], err)
					}
					killed++
				}
			}
			if killed == 0 {
				t.Fatalf("no subscriber connection named %q to kill", name)
			}
		},
	}
}

// TestWatchWithoutPubSubPermission: an ACL user denied the channels (the
// default of Redis 7's acl-pubsub-default) completes and releases claims
// as before, the scripts' SPUBLISH refused without failing them, and
// Watch declines with an error matching store.ErrSkip, at once the second
// time, so that its callers poll.
func TestWatchWithoutPubSubPermission(t *testing.T) {
	admin := redistest.NewClient(t)
	client := aclUser(t, admin, "idemguard-no-pubsub", "~idemguard-test:*", "resetchannels",
		"+evalsha", "+eval", "+script|load", "+hgetall", "+del", "+scan", "+wait",
		"+type", "+hmget", "+hget", "+hset", "+hdel", "+pexpireat", "+ping", "+ssubscribe", "+sunsubscribe", "+spublish")
	s := redistest.NewStore(t, client)
	ctx := context.Background()
	now := time.Now()
	rec := &store.Record{Key: "scope#no-pubsub", Status: store.StatusInProgress, Token: "tok", ExpiresAt: now.Add(time.Hour)}
	if _, err := s.Acquire(ctx, rec, now); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		sub, err := s.Watch(ctx, rec.Key)
		if err == nil {
			sub.Stop()
			t.Fatal("Watch succeeded for a user denied every channel")
		}
		if !errors.Is(err, store.ErrSkip) {
			t.Errorf("Watch = %v; want an error matching store.ErrSkip", err)
		}
	}
	done := *rec
	done.Status, done.Result = store.StatusCompleted, []byte(`1`)
	if err := s.Complete(ctx, &done); err != nil {
		t.Fatalf("Complete, its SPUBLISH denied = %v; want success", err)
	}
	if got, err := s.Get(ctx, rec.Key); err != nil || got.Status != store.StatusCompleted {
		t.Fatalf("Get = %v, %v", got, err)
	}
	if n := idemredis.WatchConnections(s); n != 1 {
		t.Errorf("two refused Watch calls opened %d connections; want 1, then none", n)
	}
}

// TestWatchOneConnectionPerServer: watches of many keys share the
// store's one subscriber connection.
func TestWatchOneConnectionPerServer(t *testing.T) {
	client := redistest.NewClient(t)
	s := redistest.NewStore(t, client)
	ctx := context.Background()
	var subs []store.Subscription
	for i := range 20 {
		for range 5 {
			sub, err := s.Watch(ctx, "scope#k"+strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
		}
	}
	if n := idemredis.WatchConnections(s); n != 1 {
		t.Errorf("100 watches of 20 keys opened %d subscriber connections; want 1", n)
	}
	for _, sub := range subs {
		sub.Stop()
	}
}
