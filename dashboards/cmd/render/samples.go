package main

import (
	"math"
	"regexp"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
)

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

var legendLabel = regexp.MustCompile(`\{\{\s*[A-Za-z_][A-Za-z0-9_]*\s*\}\}`)
