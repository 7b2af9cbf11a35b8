package redis_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemguard/idemguard/guard"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

// The store takes the application's own go-redis client.
func Example() {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	s, err := idemredis.New(client)
	if err != nil {
		log.Fatal(err)
	}
	g, err := guard.New(s)
	if err != nil {
		log.Fatal(err)
	}
	order := map[string]any{"order_id": "o-1001", "amount": 4200}
	chargeID, err := guard.Do(context.Background(), g, "charge", order, func(ctx context.Context) (string, error) {
		return "ch_1", nil // the side effect, run once per order
	})
	fmt.Println(chargeID, err)
}

// A Redis Cluster, or Sentinel, through go-redis's universal client; the
// store works with either, since each of its scripts touches one key.
func ExampleNew_cluster() {
	client := goredis.NewUniversalClient(&goredis.UniversalOptions{
		Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"},
	})
	defer client.Close()
	s, err := idemredis.New(client, idemredis.WithPrefix("payments:idem:"))
	if err != nil {
		log.Fatal(err)
	}
	_ = s
}

// Wait for one replica to acknowledge every claim and completion, so that
// a failover to that replica cannot lose them.
func ExampleWithReplicas() {
	client := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName:    "idempotency",
		SentinelAddrs: []string{"127.0.0.1:26379"},
	})
	defer client.Close()
	s, err := idemredis.New(client,
		idemredis.WithReplicas(1, 100*time.Millisecond),
		idemredis.WithLogger(slog.Default()))
	if err != nil {
		log.Fatal(err)
	}
	_ = s
}
