// Command render draws the dashboard's panels into a PNG with real data:
// it runs the library's workload round after round (the same workload the
// reality test runs, with a store that takes a few milliseconds a call),
// scrapes the OpenTelemetry Prometheus exporter after each round as a
// Prometheus server would every 15 seconds, stores the samples in a
// Prometheus TSDB, evaluates each panel's PromQL with the Prometheus engine
// and draws the results with gonum/plot. Grafana itself is not a
// dependency of the project; this draws the same panel definitions
// (package dashboards) that the Grafana JSON is generated from.
//
//	go run ./dashboards/cmd/render -out dashboards/dashboard.png
//
// The time axis is simulated: round i is stamped 15 s after round i-1,
// whatever the run took.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"time"

	"github.com/prometheus/prometheus/promql"

	"github.com/idemguard/idemguard/dashboards"
	"github.com/idemguard/idemguard/dashboards/internal/expo"
	"github.com/idemguard/idemguard/dashboards/internal/promcheck"
	"github.com/idemguard/idemguard/dashboards/internal/promeval"
	"github.com/idemguard/idemguard/dashboards/internal/workload"
)

// scrapeInterval is the simulated time between two rounds' scrapes.
const scrapeInterval = 15 * time.Second

func main() {
	out := flag.String("out", "dashboard.png", "the PNG to write")
	rounds := flag.Int("rounds", 48, "workload rounds, one scrape each")
	flag.Parse()
	if err := run(context.Background(), *out, *rounds); err != nil {
		log.Fatal("render: ", err)
	}
}

func run(ctx context.Context, out string, rounds int) error {
	db, err := promeval.Open()
	if err != nil {
		return err
	}
	defer db.Close()

	e, err := expo.New()
	if err != nil {
		return err
	}
	defer e.Close()
	w, err := workload.New(e.Provider, workload.Options{StoreLatency: storeLatency})
	if err != nil {
		return err
	}
	defer w.Close()

	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for i := range rounds {
		// A load that rises and falls, so that the lines move.
		n := 2 + int(math.Round(3+3*math.Sin(float64(i)/7)))
		if err := w.Round(ctx, n); err != nil {
			return err
		}
		text, err := e.Scrape(ctx)
		if err != nil {
			return err
		}
		if err := db.Append(ctx, text, start.Add(time.Duration(i)*scrapeInterval)); err != nil {
			return err
		}
	}
	end := start.Add(time.Duration(rounds-1) * scrapeInterval)

	from := start.Add(2 * scrapeInterval)
	var drawn []drawnRow
	for _, r := range dashboards.Rows(dashboards.DefaultMetrics()) {
		dr := drawnRow{title: r.Title}
		for _, p := range r.Panels {
			dp := drawnPanel{Panel: p}
			for _, q := range p.Queries {
				// Grafana's variables replaced: $__rate_interval 1m,
				// $__range the whole run, label variables "All".
				m, err := db.Range(ctx, promcheck.Substitute(q.Expr), from, end, scrapeInterval)
				if err != nil {
					return fmt.Errorf("panel %q: %w", p.Title, err)
				}
				dp.results = append(dp.results, result{query: q, matrix: m})
			}
			dr.panels = append(dr.panels, dp)
		}
		drawn = append(drawn, dr)
	}
	return render(out, drawn, from, end)
}

// storeLatency is a store call's duration: about 1 to 10 ms, with a tail.
func storeLatency() time.Duration {
	ms := 0.8 + rand.ExpFloat64()*2.5
	return time.Duration(min(ms, 60) * float64(time.Millisecond))
}

type drawnRow struct {
	title  string
	panels []drawnPanel
}

type drawnPanel struct {
	dashboards.Panel
	results []result
}

type result struct {
	query  dashboards.Query
	matrix promql.Matrix
}
