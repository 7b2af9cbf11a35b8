// Package promeval keeps scrapes of a metrics endpoint in a Prometheus TSDB,
// each at a time of the caller's (a simulated scrape interval), and
// evaluates PromQL over them with the Prometheus engine, as a Prometheus
// server would: for the renderer's panels, and for the tests that check
// when each alert fires.
package promeval

import (
	"context"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/idemguard/idemguard/dashboards/internal/expo"
	"github.com/idemguard/idemguard/dashboards/internal/promcheck"
)

// DB is a TSDB in a temporary directory with a PromQL engine over it.
type DB struct {
	dir    string
	db     *tsdb.DB
	engine *promql.Engine
}

// Open opens an empty DB. Close removes it.
func Open() (*DB, error) {
	dir, err := os.MkdirTemp("", "idemguard-promeval-")
	if err != nil {
		return nil, err
	}
	db, err := tsdb.Open(dir, nil, nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &DB{dir: dir, db: db, engine: promql.NewEngine(promql.EngineOpts{
		MaxSamples:    10_000_000,
		Timeout:       time.Minute,
		LookbackDelta: 5 * time.Minute,
		Parser:        promcheck.Parser,
	})}, nil
}

// Close closes the DB and removes its directory.
func (d *DB) Close() error {
	err := d.db.Close()
	os.RemoveAll(d.dir)
	return err
}

// Append stores the samples of a text exposition (a scrape) at t.
func (d *DB) Append(ctx context.Context, text string, t time.Time) error {
	fams, err := expo.Parse(text)
	if err != nil {
		return err
	}
	app := d.db.Appender(ctx)
	for _, s := range samples(fams) {
		if _, err := app.Append(0, s.labels, t.UnixMilli(), s.value); err != nil {
			app.Rollback()
			return err
		}
	}
	return app.Commit()
}

// Range evaluates expr at every step from from to end.
func (d *DB) Range(ctx context.Context, expr string, from, end time.Time, step time.Duration) (promql.Matrix, error) {
	q, err := d.engine.NewRangeQuery(ctx, d.db, nil, expr, from, end, step)
	var out promql.Matrix
	err = run(ctx, q, err, func(res *promql.Result) error {
		m, err := res.Matrix()
		for _, s := range m {
			out = append(out, promql.Series{Metric: s.Metric.Copy(), Floats: slices.Clone(s.Floats)})
		}
		return err
	})
	return out, err
}

// Instant evaluates expr at t.
func (d *DB) Instant(ctx context.Context, expr string, t time.Time) (promql.Vector, error) {
	q, err := d.engine.NewInstantQuery(ctx, d.db, nil, expr, t)
	var out promql.Vector
	err = run(ctx, q, err, func(res *promql.Result) error {
		v, err := res.Vector()
		for _, s := range v {
			out = append(out, promql.Sample{Metric: s.Metric.Copy(), T: s.T, F: s.F})
		}
		return err
	})
	return out, err
}

// run executes q (made with err) and hands its result to keep, which
// copies what it needs: closing q returns the result's points to the
// engine's pool.
func run(ctx context.Context, q promql.Query, err error, keep func(*promql.Result) error) error {
	if err != nil {
		return err
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return res.Err
	}
	return keep(res)
}

type sample struct {
	labels labels.Labels
	value  float64
}

// samples expands metric families into the samples Prometheus stores, as
// promcheck.Series does for names.
func samples(fams map[string]*dto.MetricFamily) []sample {
	var out []sample
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			b := labels.NewBuilder(labels.EmptyLabels())
			for _, lp := range m.GetLabel() {
				b.Set(lp.GetName(), lp.GetValue())
			}
			add := func(n string, v float64, kv ...string) {
				c := labels.NewBuilder(b.Labels())
				c.Set(labels.MetricName, n)
				for i := 0; i+1 < len(kv); i += 2 {
					c.Set(kv[i], kv[i+1])
				}
				out = append(out, sample{c.Labels(), v})
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, bk := range h.GetBucket() {
					add(name+"_bucket", float64(bk.GetCumulativeCount()), "le", formatLe(bk.GetUpperBound()))
				}
				add(name+"_bucket", float64(h.GetSampleCount()), "le", "+Inf")
				add(name+"_sum", h.GetSampleSum())
				add(name+"_count", float64(h.GetSampleCount()))
			case dto.MetricType_UNTYPED:
				add(name, m.GetUntyped().GetValue())
			}
		}
	}
	return out
}

func formatLe(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
