package dashboards_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"

	"github.com/idemguard/idemguard/dashboards"
	"github.com/idemguard/idemguard/dashboards/internal/expo"
	"github.com/idemguard/idemguard/dashboards/internal/promcheck"
	"github.com/idemguard/idemguard/dashboards/internal/workload"
	"github.com/idemguard/idemguard/telemetry"
)

// The committed files are what the code generates from package telemetry's
// names: a renamed metric, or a changed panel, fails here until the files
// are regenerated.
func TestGeneratedFilesAreCommitted(t *testing.T) {
	files, err := dashboards.Generate(dashboards.DefaultMetrics())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the code generates; run go generate ./dashboards/... (or make dashboards) and commit it", name)
		}
	}
}

var scrape struct {
	once   sync.Once
	text   string
	series []labels.Labels
	err    error
}

// scraped runs the workload once — every outcome the dashboard charts,
// through the OpenTelemetry SDK and its Prometheus exporter, and HTTP and
// gRPC requests through otelhttp and otelgrpc — and returns the scraped
// exposition and its series.
func scraped(t *testing.T) (string, []labels.Labels) {
	t.Helper()
	scrape.once.Do(func() {
		ctx := context.Background()
		e, err := expo.New()
		if err != nil {
			scrape.err = err
			return
		}
		defer e.Close()
		w, err := workload.New(e.Provider, workload.Options{})
		if err != nil {
			scrape.err = err
			return
		}
		defer w.Close()
		if scrape.err = w.Round(ctx, 2); scrape.err != nil {
			return
		}
		if scrape.text, scrape.err = e.Scrape(ctx); scrape.err != nil {
			return
		}
		scrape.series, scrape.err = seriesOf(scrape.text)
	})
	if scrape.err != nil {
		t.Fatal(scrape.err)
	}
	return scrape.text, scrape.series
}

func seriesOf(text string) ([]labels.Labels, error) {
	fams, err := expo.Parse(text)
	if err != nil {
		return nil, err
	}
	return promcheck.Series(fams), nil
}

// query is an expression as committed, with where it is.
type query struct{ where, expr, legend string }

// committedQueries reads every query of the committed dashboard JSON and
// every expression of the committed rule file (which rulefmt, Prometheus's
// own rule-file loader, must accept).
func committedQueries(t *testing.T) []query {
	t.Helper()
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	b, err := os.ReadFile(dashboards.DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var out []query
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, query{"panel " + p.Title, tg.Expr, tg.LegendFormat})
		}
	}
	for _, v := range d.Templating.List {
		// label_values(series, label) asks for label on series.
		if s, ok := strings.CutPrefix(v.Query, "label_values("); ok {
			series, label, _ := strings.Cut(strings.TrimSuffix(s, ")"), ", ")
			out = append(out, query{"variable " + v.Name, "count by (" + label + ") (" + series + ")", ""})
		}
	}
	rb, err := os.ReadFile(dashboards.RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(rb, false, model.UTF8Validation, promcheck.Parser, nil)
	if len(errs) > 0 {
		t.Fatalf("%s: %v", dashboards.RulesFile, errs)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			out = append(out, query{"alert " + r.Alert, r.Expr, ""})
		}
	}
	return out
}

// Every query of the committed dashboard and every alert expression parses
// with the PromQL parser and selects only series that a real run of the
// library emits: their names, label names and label values.
func TestQueriesMatchWhatTheLibraryEmits(t *testing.T) {
	_, series := scraped(t)
	qs := committedQueries(t)
	if len(qs) < 30 {
		t.Fatalf("%d queries in the committed files, want the dashboard's and the alerts'", len(qs))
	}
	for _, q := range qs {
		if err := promcheck.Check(q.expr, q.legend, series); err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
	}
	t.Logf("%d queries checked against %d scraped series", len(qs), len(series))
}

// The dashboard charts every metric the library emits.
func TestEveryMetricIsCharted(t *testing.T) {
	m := dashboards.DefaultMetrics()
	all := strings.Join(dashboards.Exprs(dashboards.Rows(m)), "\n")
	for _, name := range []string{m.Calls, m.LockWait, m.StoreDuration, m.LeaseLost, m.BatchItems, m.ClaimTakenOver} {
		if !strings.Contains(all, name) {
			t.Errorf("no panel queries %s", name)
		}
	}
}

// A renamed metric fails the build both ways: renamed in telemetry/, the
// generated files change (the golden test fails) and the dashboard would
// query a series the running library does not emit; renamed in what the
// library emits, the committed queries select nothing.
func TestRenamedMetricFailsTheChecks(t *testing.T) {
	text, series := scraped(t)

	renamed := dashboards.DefaultMetrics()
	renamed.Calls = dashboards.Counter("idemguard.invocations")
	files, err := dashboards.Generate(renamed)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(dashboards.DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(files[dashboards.DashboardFile], committed) {
		t.Error("a dashboard generated with a renamed calls metric equals the committed one")
	}
	failed := 0
	for _, e := range dashboards.Exprs(dashboards.Rows(renamed)) {
		if err := promcheck.Check(e, "", series); err != nil {
			failed++
			if !strings.Contains(err.Error(), "no series named idemguard_invocations_total") {
				t.Errorf("check of %s failed with %v, want it to name the missing series", e, err)
			}
		}
	}
	if failed == 0 {
		t.Error("no query failed with the calls metric renamed")
	}

	// The library emits lease losses under another name.
	old := dashboards.Counter(telemetry.MetricLeaseLost)
	if !strings.Contains(text, old) {
		t.Fatalf("the scrape has no %s", old)
	}
	other, err := seriesOf(strings.ReplaceAll(text, old, "idemguard_lease_lost_claims_total"))
	if err != nil {
		t.Fatal(err)
	}
	var alertFailed bool
	for _, q := range committedQueries(t) {
		err := promcheck.Check(q.expr, q.legend, other)
		if q.where == "alert IdemguardLeaseLost" {
			alertFailed = err != nil
		}
		if err != nil && !strings.Contains(q.expr, old) {
			t.Errorf("%s fails without querying %s: %v", q.where, old, err)
		}
	}
	if !alertFailed {
		t.Error("the lease-lost alert passed the check against a scrape without its series")
	}
}

// The checker itself: it refuses what does not parse, an unknown label,
// an absent value, and a legend or grouping label that is not there.
func TestCheckRefuses(t *testing.T) {
	_, series := scraped(t)
	m := dashboards.DefaultMetrics()
	for _, c := range []struct{ expr, legend, want string }{
		{"sum(rate(" + m.Calls + "[5m]", "", "does not parse"},
		{m.Calls + `{idemguard_outcome="exploded"}`, "", "with idemguard_outcome=\"exploded\""},
		{m.Calls + `{idemguard_outcomes=~".+"}`, "", "idemguard_outcomes"},
		{"sum by (idemguard_region) (" + m.Calls + ")", "", "groups by \"idemguard_region\""},
		{"sum by (idemguard_scope) (" + m.Calls + ")", "{{idemguard_region}}", "legend"},
	} {
		err := promcheck.Check(c.expr, c.legend, series)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%s, %q) = %v, want an error with %q", c.expr, c.legend, err, c.want)
		}
	}
}

// A panel that counts events over the time range shows a whole number: its
// query rounds the increase (which Prometheus extrapolates to fractions),
// answers 0 rather than "No data" when nothing happened, and the committed
// dashboard draws it with no decimals and no unit scaling.
func TestCountPanelsShowWholeNumbers(t *testing.T) {
	var d struct {
		Panels []struct {
			Title       string `json:"title"`
			FieldConfig struct {
				Defaults struct {
					Decimals *float64 `json:"decimals"`
					Unit     string   `json:"unit"`
				} `json:"defaults"`
			} `json:"fieldConfig"`
		} `json:"panels"`
	}
	b, err := os.ReadFile(dashboards.DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	committed := map[string]int{}
	for i, p := range d.Panels {
		committed[p.Title] = i
	}
	counts := 0
	for _, r := range dashboards.Rows(dashboards.DefaultMetrics()) {
		for _, p := range r.Panels {
			if p.Kind != dashboards.Stat || !strings.Contains(p.Queries[0].Expr, "increase(") {
				continue
			}
			counts++
			if e := p.Queries[0].Expr; !strings.HasPrefix(e, "round(") || !strings.HasSuffix(e, " or vector(0)") {
				t.Errorf("panel %q counts with %s; want round(…) or vector(0)", p.Title, e)
			}
			i, ok := committed[p.Title]
			if !ok {
				t.Errorf("panel %q is not in the committed dashboard", p.Title)
				continue
			}
			def := d.Panels[i].FieldConfig.Defaults
			if def.Decimals == nil || *def.Decimals != 0 || def.Unit != "none" {
				t.Errorf("panel %q is drawn with decimals %v and unit %q; want 0 and none", p.Title, def.Decimals, def.Unit)
			}
		}
	}
	if counts < 3 {
		t.Errorf("%d count panels; want the lease losses, payload mismatches and stuck claims taken over", counts)
	}
}
