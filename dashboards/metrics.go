// Package dashboards generates idemguard's Grafana dashboard
// (idemguard.json) and Prometheus alert rules (alerts.yaml) from the metric
// names in package telemetry, so that the two cannot drift from what the
// library emits. Regenerate them with
//
//	go generate ./dashboards/...
//
// (or make dashboards); the package's tests fail when the committed files
// differ from what the code generates, and check every query and alert
// expression against the series that a real workload emits through the
// OpenTelemetry SDK's Prometheus exporter.
//
// The queries use the names the OpenTelemetry Prometheus exporter gives
// (dots become underscores; counters end in _total; histograms in seconds
// end in _seconds_bucket, _seconds_sum and _seconds_count), which are also
// the OpenTelemetry Collector's Prometheus exporters' names by default.
package dashboards

//go:generate go run ./cmd/generate -out .

import (
	"strings"

	"github.com/idemguard/idemguard/internal/telemetry"
)

// Metrics are the Prometheus names the dashboard and the alert rules query:
// series names and label names.
type Metrics struct {
	// Series of the library (package telemetry).
	Calls         string // counter: idemguard_calls_total
	LockWait      string // histogram: idemguard_lock_wait_seconds (_bucket, _sum, _count)
	StoreDuration string // histogram: idemguard_store_duration_seconds
	LeaseLost     string // counter: idemguard_lease_lost_total
	BatchItems    string // counter: idemguard_batch_items_total
	// ClaimTakenOver is the counter of claims taken over after their
	// holder's lease lapsed: idemguard_claim_taken_over_total.
	ClaimTakenOver string

	// Labels of the library's series.
	Scope, Outcome, Store, Cache, Operation, ErrorType string

	// Outcome values.
	Executed, Replayed, InProgress, PayloadMismatch, Unguarded, Error, NotRun string

	// Series and labels of the OpenTelemetry HTTP and gRPC instrumentation
	// (otelhttp, otelgrpc), for the adapters' problem responses.
	HTTPDuration, HTTPStatus string
	RPCDuration, RPCStatus   string
}

// DefaultMetrics are the names the library emits, derived from package
// telemetry.
func DefaultMetrics() Metrics {
	return Metrics{
		Calls:         Counter(telemetry.MetricCalls),
		LockWait:      Histogram(telemetry.MetricLockWait, "s"),
		StoreDuration: Histogram(telemetry.MetricStoreDuration, "s"),
		LeaseLost:     Counter(telemetry.MetricLeaseLost),
		BatchItems:    Counter(telemetry.MetricBatchItems),

		ClaimTakenOver: Counter(telemetry.MetricClaimTakenOver),

		Scope:     Label(string(telemetry.ScopeKey)),
		Outcome:   Label(string(telemetry.OutcomeKey)),
		Store:     Label(string(telemetry.StoreKey)),
		Cache:     Label(string(telemetry.CacheKey)),
		Operation: Label(string(telemetry.OperationKey)),
		ErrorType: Label(string(telemetry.ErrorTypeKey)),

		Executed:        telemetry.OutcomeExecuted,
		Replayed:        telemetry.OutcomeReplayed,
		InProgress:      telemetry.OutcomeInProgress,
		PayloadMismatch: telemetry.OutcomePayloadMismatch,
		Unguarded:       telemetry.OutcomeUnguarded,
		Error:           telemetry.OutcomeError,
		NotRun:          telemetry.OutcomeNotRun,

		// OpenTelemetry's semantic conventions, as otelhttp and otelgrpc
		// (v0.72) record them.
		HTTPDuration: Histogram("http.server.request.duration", "s"),
		HTTPStatus:   Label("http.response.status_code"),
		RPCDuration:  Histogram("rpc.server.call.duration", "s"),
		RPCStatus:    Label("rpc.response.status_code"),
	}
}

// Label is the Prometheus name of an OpenTelemetry attribute key: every
// character outside [a-zA-Z0-9_] becomes an underscore.
func Label(key string) string {
	return sanitize(key)
}

// Counter is the Prometheus name of an OpenTelemetry counter: its name
// sanitized, with _total.
func Counter(name string) string {
	return sanitize(name) + "_total"
}

// Histogram is the Prometheus base name of an OpenTelemetry histogram with
// unit ("s" adds _seconds); its series add _bucket, _sum and _count.
func Histogram(name, unit string) string {
	n := sanitize(name)
	if unit == "s" {
		n += "_seconds"
	}
	return n
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == ':' {
			return r
		}
		return '_'
	}, s)
}

// Files the generator writes, relative to the dashboards directory.
const (
	DashboardFile = "idemguard.json"
	RulesFile     = "alerts.yaml"
)

// Generate returns the generated files by name for the names in m.
func Generate(m Metrics) (map[string][]byte, error) {
	d, err := Dashboard(m)
	if err != nil {
		return nil, err
	}
	r, err := Rules(m)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{DashboardFile: d, RulesFile: r}, nil
}
