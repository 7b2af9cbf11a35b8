// Package promcheck checks PromQL expressions against the series of a
// scrape: that each parses with the Prometheus PromQL parser, that each of
// its selectors selects series that exist (names, label names and values),
// and that the labels it groups by and its legend names exist on them.
package promcheck

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Parser is the PromQL parser the checks and the renderer use: Prometheus's
// defaults.
var Parser = parser.NewParser(parser.Options{})

// Series expands scraped metric families into the series Prometheus stores:
// a histogram becomes its _bucket (with le), _sum and _count series, a
// summary its quantiles, _sum and _count.
func Series(families map[string]*dto.MetricFamily) []labels.Labels {
	var out []labels.Labels
	for name, f := range families {
		for _, m := range f.GetMetric() {
			b := labels.NewBuilder(labels.EmptyLabels())
			for _, lp := range m.GetLabel() {
				b.Set(lp.GetName(), lp.GetValue())
			}
			with := func(n string, kv ...string) labels.Labels {
				c := labels.NewBuilder(b.Labels())
				c.Set(labels.MetricName, n)
				for i := 0; i+1 < len(kv); i += 2 {
					c.Set(kv[i], kv[i+1])
				}
				return c.Labels()
			}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				for _, bk := range m.GetHistogram().GetBucket() {
					out = append(out, with(name+"_bucket", "le", fmt.Sprint(bk.GetUpperBound())))
				}
				out = append(out, with(name+"_bucket", "le", "+Inf"), with(name+"_sum"), with(name+"_count"))
			case dto.MetricType_SUMMARY:
				for _, q := range m.GetSummary().GetQuantile() {
					out = append(out, with(name, "quantile", fmt.Sprint(q.GetQuantile())))
				}
				out = append(out, with(name+"_sum"), with(name+"_count"))
			default:
				out = append(out, with(name))
			}
		}
	}
	return out
}

// Substitute replaces Grafana's variables in expr with values a Prometheus
// server accepts: $__rate_interval and $__interval with 1m, $__range with
// 1h, and any other $variable (a dashboard's label variables, which
// Grafana fills with a regular expression) with ".*", the value of "All".
func Substitute(expr string) string {
	expr = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h").Replace(expr)
	return variable.ReplaceAllString(expr, ".*")
}

var variable = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)

var legendLabel = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// Check checks expr (after Substitute) against series. legend, if not
// empty, is the query's legend format, whose {{label}} names must exist on
// the series the expression selects.
func Check(expr, legend string, series []labels.Labels) error {
	e, err := Parser.ParseExpr(Substitute(expr))
	if err != nil {
		return fmt.Errorf("%s: does not parse: %w", expr, err)
	}
	var errs []error
	names := map[string]bool{} // label names of every series selected
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		sel := selected(vs.LabelMatchers, series)
		if len(sel) == 0 {
			errs = append(errs, fmt.Errorf("%s: %s selects no series%s", expr, vs, nearest(vs.LabelMatchers, series)))
		}
		for _, s := range sel {
			s.Range(func(l labels.Label) { names[l.Name] = true })
		}
		return nil
	})
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Labels the expression groups or matches by must exist on the series
	// selected under it.
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		var grouping []string
		var under parser.Node
		switch n := node.(type) {
		case *parser.AggregateExpr:
			grouping, under = n.Grouping, n.Expr
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				grouping = append(slices.Clone(n.VectorMatching.MatchingLabels), n.VectorMatching.Include...)
				under = n
			}
		}
		if len(grouping) == 0 {
			return nil
		}
		have := map[string]bool{}
		parser.Inspect(under, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				for _, s := range selected(vs.LabelMatchers, series) {
					s.Range(func(l labels.Label) { have[l.Name] = true })
				}
			}
			return nil
		})
		for _, g := range grouping {
			if !have[g] {
				errs = append(errs, fmt.Errorf("%s: groups by %q, which no series it selects has", expr, g))
			}
		}
		return nil
	})
	for _, m := range legendLabel.FindAllStringSubmatch(legend, -1) {
		if !names[m[1]] {
			errs = append(errs, fmt.Errorf("%s: legend %q names label %q, which no series it selects has", expr, legend, m[1]))
		}
	}
	return errors.Join(errs...)
}

// selected returns the series that match every matcher.
func selected(ms []*labels.Matcher, series []labels.Labels) []labels.Labels {
	var out []labels.Labels
	for _, s := range series {
		if matchesAll(ms, s) {
			out = append(out, s)
		}
	}
	return out
}

func matchesAll(ms []*labels.Matcher, s labels.Labels) bool {
	for _, m := range ms {
		if !m.Matches(s.Get(m.Name)) {
			return false
		}
	}
	return true
}

// nearest says which matcher fails: the series name, or the first label
// matcher that no series of that name satisfies.
func nearest(ms []*labels.Matcher, series []labels.Labels) string {
	var name *labels.Matcher
	for _, m := range ms {
		if m.Name == labels.MetricName {
			name = m
		}
	}
	if name == nil {
		return ""
	}
	named := selected([]*labels.Matcher{name}, series)
	if len(named) == 0 {
		return fmt.Sprintf(" (no series named %s)", name.Value)
	}
	for _, m := range ms {
		if len(selected([]*labels.Matcher{name, m}, series)) == 0 {
			return fmt.Sprintf(" (no %s series with %s)", name.Value, m)
		}
	}
	return ""
}
