package postgres_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/testing/faultproxy"
	"github.com/idemguard/idemguard/internal/testing/linz"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
	"github.com/idemguard/idemguard/store/storetest"
)

// PostgreSQL keeps timestamps in microseconds; the store rounds up.
var precision = linz.Precision{Expiry: time.Microsecond, Lease: time.Microsecond}

var linzFaults = faultproxy.Config{Rate: 0.08, MaxLatency: 150 * time.Millisecond}

// linzStore returns a store on a fresh table whose pool reaches PostgreSQL
// through a fault proxy that faults each request at its message
// boundaries: the connection reset before the request, the answer lost
// (RST or FIN) after the request ran, latency.
func linzStore(t *testing.T, faults faultproxy.Config) store.Store {
	t.Helper()
	direct := postgrestest.NewPool(t)
	table := postgrestest.NewTable(t, direct, "")
	u, err := url.Parse(postgrestest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.NewPostgres(u.Host, faults)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	pool := postgrestest.NewPool(t, func(c *pgxpool.Config) {
		pc, err := pgxpool.ParseConfig(u.String())
		if err != nil {
			t.Fatal(err)
		}
		c.ConnConfig.Host, c.ConnConfig.Port = pc.ConnConfig.Host, pc.ConnConfig.Port
	})
	s, err := postgres.New(pool, postgres.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Histories of concurrent claims on a few hot keys through the fault
// proxy are linearizable.
func TestLinearizable(t *testing.T) {
	storetest.RunLinearizable(t, linzStore(t, linzFaults), storetest.WithPrecision(precision.Expiry, precision.Lease), storetest.WithOps(1500))
}

// Each broken store is caught.
func TestLinearizableMutants(t *testing.T) {
	linz.RunMutants(t, func(t *testing.T) store.Store { return linzStore(t, linzFaults) }, precision, linz.HistoryConfig{Ops: 600})
}
