package dashboards

import (
	"fmt"
	"strings"
)

// Kind is how a panel draws its queries.
type Kind int

// Panel kinds.
const (
	TimeSeries Kind = iota // lines over time
	Stat                   // one number: the last value of its query
	Heatmap                // histogram buckets over time
)

// Query is one PromQL query of a panel. Expressions may use the dashboard's
// variables: $scope and $store (regular expressions; ".*" for all) and
// Grafana's $__rate_interval and $__range.
type Query struct {
	Expr   string
	Legend string // Grafana legend format, e.g. "{{idemguard_outcome}}"
}

// Panel is one panel of the dashboard, drawn by Grafana from the generated
// JSON and by the project's renderer (cmd/render) from the same definition.
type Panel struct {
	Title       string
	Description string // what the panel answers, shown in Grafana's panel info
	Kind        Kind
	Unit        string // a Grafana unit: "reqps", "percentunit", "s", "short", "none"
	Width       int    // in Grafana's 24 grid columns
	Stack       bool   // stack the series (time series)
	// Whole is set on a panel that counts events: it is drawn with no
	// decimals (a count of 3 is "3", never "2.98").
	Whole   bool
	Queries []Query
}

// Row is a titled row of panels.
type Row struct {
	Title  string
	Panels []Panel
}

// Variables of the dashboard, as they appear in expressions.
const (
	ScopeVar     = "$scope"
	StoreVar     = "$store"
	RateInterval = "$__rate_interval"
	Range        = "$__range"
)

// sel is a selector: name{matchers}.
func sel(name string, matchers ...string) string {
	return name + "{" + strings.Join(matchers, ", ") + "}"
}

func eq(label, value string) string { return fmt.Sprintf("%s=%q", label, value) }
func ne(label, value string) string { return fmt.Sprintf("%s!=%q", label, value) }
func re(label, value string) string { return fmt.Sprintf("%s=~%q", label, value) }

func rate(selector string) string { return "rate(" + selector + "[" + RateInterval + "])" }

func legend(label string) string { return "{{" + label + "}}" }

// count is a stat's count of the events of counter selector over the
// dashboard's time range, as a whole number: increase extrapolates to the
// range's edges (3 events read 2.98), so it is rounded; 0, not "No data",
// when nothing happened.
func count(selector string) string {
	return "round(sum(increase(" + selector + "[" + Range + "]))) or vector(0)"
}

// Rows returns the dashboard's rows for the names in m.
func Rows(m Metrics) []Row {
	scope := re(m.Scope, ScopeVar)
	store := re(m.Store, StoreVar)
	calls := func(more ...string) string {
		return sel(m.Calls, append([]string{scope, store}, more...)...)
	}
	stopped := re(m.Outcome, strings.Join([]string{m.Replayed, m.InProgress, m.PayloadMismatch}, "|"))
	guarded := ne(m.Outcome, m.Unguarded)
	storeErrors := re(m.ErrorType, "store|not_recorded")
	quantile := func(q float64, hist string, by ...string) string {
		return fmt.Sprintf("histogram_quantile(%g, sum by (%s) (%s))", q, strings.Join(append([]string{"le"}, by...), ", "), hist)
	}
	scoped := func(name string, more ...string) string {
		return sel(name, append([]string{scope, store}, more...)...)
	}
	lockBuckets := rate(sel(m.LockWait+"_bucket", scope))
	storeBuckets := rate(sel(m.StoreDuration+"_bucket", store))

	return []Row{
		{Title: "Overview", Panels: []Panel{
			{Title: "Guarded calls", Kind: Stat, Unit: "reqps", Width: 3,
				Description: "Calls through the guard per second, every outcome.",
				Queries:     []Query{{Expr: "sum(" + rate(calls()) + ")"}}},
			{Title: "Duplicates stopped", Kind: Stat, Unit: "percentunit", Width: 4,
				Description: "Share of keyed calls that did not run their function because the key was seen before: replayed (from the store, the local cache, or shared with a concurrent call in the same process), turned away in progress, or refused for another payload.",
				Queries:     []Query{{Expr: "sum(" + rate(calls(stopped)) + ") / sum(" + rate(calls(guarded)) + ")"}}},
			{Title: "In-progress conflicts", Kind: Stat, Unit: "reqps", Width: 4,
				Description: "Calls per second that found their key held by a running call (its lease live) and gave up (Reject mode, or Wait mode past its budget): live contention, not stuck claims.",
				Queries:     []Query{{Expr: "sum(" + rate(calls(eq(m.Outcome, m.InProgress))) + ")"}}},
			{Title: "Stuck claims taken over", Kind: Stat, Unit: "none", Width: 3, Whole: true,
				Description: "Claims left by a holder that died (crashed, killed, hung past its lease, cut off from the store) and taken over by a later call once their lease lapsed, over the dashboard's time range (idemguard.claim.taken_over). The later call ran the function again: check that the effect did not run twice.",
				Queries:     []Query{{Expr: count(scoped(m.ClaimTakenOver))}}},
			{Title: "Lease losses", Kind: Stat, Unit: "none", Width: 3, Whole: true,
				Description: "Calls that ran their function and then found their claim gone (taken over after their lease lapsed, or deleted), so that their outcome was not recorded, over the dashboard's time range (idemguard.lease.lost). Any is worth a look: the effect may have run twice.",
				Queries:     []Query{{Expr: count(scoped(m.LeaseLost))}}},
			{Title: "Payload mismatches", Kind: Stat, Unit: "none", Width: 3, Whole: true,
				Description: "Calls refused because their key was first used with another payload, over the dashboard's time range.",
				Queries:     []Query{{Expr: count(calls(eq(m.Outcome, m.PayloadMismatch)))}}},
			{Title: "Store errors", Kind: Stat, Unit: "reqps", Width: 4,
				Description: "Calls per second that failed on the store: a claim that could not be written (error.type store) or an outcome that could not be recorded (not_recorded).",
				Queries:     []Query{{Expr: "sum(" + rate(calls(eq(m.Outcome, m.Error), storeErrors)) + ") or vector(0)"}}},
		}},
		{Title: "Calls", Panels: []Panel{
			{Title: "Calls by outcome", Kind: TimeSeries, Unit: "reqps", Width: 12, Stack: true,
				Description: "executed: the function ran and its outcome was recorded; replayed: a recorded outcome was returned (including calls that shared a concurrent call's outcome in the same process); in_progress: turned away while another call held the key; payload_mismatch: the key was used with another payload; error: failed (see Errors by type); unguarded: no key, ran without a record.",
				Queries:     []Query{{Expr: "sum by (" + m.Outcome + ") (" + rate(calls()) + ")", Legend: legend(m.Outcome)}}},
			{Title: "Share of duplicates stopped, by scope", Kind: TimeSeries, Unit: "percentunit", Width: 12,
				Description: "Per scope, the share of keyed calls that were duplicates and did not run their function.",
				Queries: []Query{{Expr: "sum by (" + m.Scope + ") (" + rate(calls(stopped)) + ") / sum by (" + m.Scope + ") (" + rate(calls(guarded)) + ")",
					Legend: legend(m.Scope)}}},
			{Title: "Errors by type", Kind: TimeSeries, Unit: "reqps", Width: 12,
				Description: "Failed calls by error.type: the guard's error (store, not_recorded, lease_lost, key_missing, …), \"panic\", or the Go type of the function's own error.",
				Queries:     []Query{{Expr: "sum by (" + m.ErrorType + ") (" + rate(calls(eq(m.Outcome, m.Error))) + ")", Legend: legend(m.ErrorType)}}},
			{Title: "Cache hit ratio", Kind: TimeSeries, Unit: "percentunit", Width: 12,
				Description: "For guards with a local cache (guard.WithCache): the share of calls answered from the cache without a store request.",
				Queries: []Query{{Expr: "sum by (" + m.Scope + ") (" + rate(calls(eq(m.Cache, "hit"))) + ") / sum by (" + m.Scope + ") (" + rate(calls(re(m.Cache, "hit|miss"))) + ")",
					Legend: legend(m.Scope)}}},
		}},
		{Title: "Contention and leases", Panels: []Panel{
			{Title: "In-progress conflicts, by scope", Kind: TimeSeries, Unit: "reqps", Width: 8,
				Description: "Calls turned away because another call held their key under a live lease: live contention. A steady rate for one scope means calls are held for long (a slow function) while clients retry faster.",
				Queries:     []Query{{Expr: "sum by (" + m.Scope + ") (" + rate(calls(eq(m.Outcome, m.InProgress))) + ")", Legend: legend(m.Scope)}}},
			{Title: "Waits for another holder", Kind: TimeSeries, Unit: "reqps", Width: 8,
				Description: "Calls in Wait mode that waited for the holder of their key, by how the wait ended (idemguard.lock.wait).",
				Queries:     []Query{{Expr: "sum by (" + m.Outcome + ") (" + rate(sel(m.LockWait+"_count", scope)) + ")", Legend: legend(m.Outcome)}}},
			{Title: "Wait time", Kind: TimeSeries, Unit: "s", Width: 8,
				Description: "How long waiting calls waited (quantiles of idemguard.lock.wait).",
				Queries: []Query{
					{Expr: quantile(0.5, lockBuckets), Legend: "p50"},
					{Expr: quantile(0.95, lockBuckets), Legend: "p95"},
					{Expr: quantile(0.99, lockBuckets), Legend: "p99"},
				}},
			{Title: "Stuck claims taken over, by scope", Kind: TimeSeries, Unit: "ops", Width: 8,
				Description: "Claims left by holders that died, taken over by a later call once their lease lapsed (idemguard.claim.taken_over), per second by scope: crashes, kills and hangs between a claim and its completion.",
				Queries:     []Query{{Expr: "sum by (" + m.Scope + ") (" + rate(scoped(m.ClaimTakenOver)) + ")", Legend: legend(m.Scope)}}},
			{Title: "Lease extensions and losses", Kind: TimeSeries, Unit: "ops", Width: 8,
				Description: "Lease extensions written while functions ran (store calls of operation extend), and calls that found their claim gone when they came to record their outcome (idemguard.lease.lost), by scope.",
				Queries: []Query{
					{Expr: "sum by (" + m.Store + ") (" + rate(sel(m.StoreDuration+"_count", store, eq(m.Operation, "extend"))) + ")", Legend: "extensions " + legend(m.Store)},
					{Expr: "sum by (" + m.Scope + ") (" + rate(scoped(m.LeaseLost)) + ")", Legend: "lease lost " + legend(m.Scope)},
				}},
			{Title: "Payload mismatches, by scope", Kind: TimeSeries, Unit: "reqps", Width: 8,
				Description: "Calls refused because their key was first used with another payload: a client reusing keys, or a key path that selects too little.",
				Queries:     []Query{{Expr: "sum by (" + m.Scope + ") (" + rate(calls(eq(m.Outcome, m.PayloadMismatch))) + ")", Legend: legend(m.Scope)}}},
		}},
		{Title: "Store", Panels: []Panel{
			{Title: "Store latency", Kind: Heatmap, Unit: "s", Width: 12,
				Description: "Every store call's duration (idemguard.store.duration), as a heatmap of its buckets.",
				Queries:     []Query{{Expr: "sum by (le) (" + storeBuckets + ")", Legend: legend("le")}}},
			{Title: "Store latency p99, by operation", Kind: TimeSeries, Unit: "s", Width: 12,
				Description: "99th percentile of store calls by operation: acquire (the claim), complete, extend, release, get, get_many.",
				Queries:     []Query{{Expr: quantile(0.99, storeBuckets, m.Operation), Legend: legend(m.Operation)}}},
			{Title: "Store calls, by operation", Kind: TimeSeries, Unit: "ops", Width: 12,
				Description: "Store calls per second by operation.",
				Queries:     []Query{{Expr: "sum by (" + m.Operation + ") (" + rate(sel(m.StoreDuration+"_count", store)) + ")", Legend: legend(m.Operation)}}},
			{Title: "Store errors, by scope", Kind: TimeSeries, Unit: "reqps", Width: 12,
				Description: "Calls that failed on the store, by scope and error.type: store (the claim or a read failed) or not_recorded (the function ran, its outcome could not be recorded).",
				Queries: []Query{{Expr: "sum by (" + m.Scope + ", " + m.ErrorType + ") (" + rate(calls(eq(m.Outcome, m.Error), storeErrors)) + ")",
					Legend: legend(m.Scope) + " " + legend(m.ErrorType)}}},
		}},
		{Title: "Batches", Panels: []Panel{
			{Title: "Batch items, by outcome", Kind: TimeSeries, Unit: "ops", Width: 12, Stack: true,
				Description: "Items of guard.DoBatch calls per second by outcome; not_run: items a batch did not start (it stopped on an error, or its context ended).",
				Queries:     []Query{{Expr: "sum by (" + m.Outcome + ") (" + rate(sel(m.BatchItems, scope, store)) + ")", Legend: legend(m.Outcome)}}},
			{Title: "Batch progress", Kind: TimeSeries, Unit: "percentunit", Width: 12,
				Description: "Per scope, the share of batch items that were run or replayed (not left not_run).",
				Queries: []Query{{Expr: "sum by (" + m.Scope + ") (" + rate(sel(m.BatchItems, scope, store, ne(m.Outcome, m.NotRun))) + ") / sum by (" + m.Scope + ") (" + rate(sel(m.BatchItems, scope, store)) + ")",
					Legend: legend(m.Scope)}}},
		}},
		{Title: "HTTP and gRPC (otelhttp, otelgrpc)", Panels: []Panel{
			{Title: "HTTP problem responses, by status", Kind: TimeSeries, Unit: "reqps", Width: 12,
				Description: "HTTP responses with a 4xx or 5xx status, from otelhttp's http.server.request.duration (install otelhttp in front of httpguard). httpguard answers 400 (no or bad key), 409 (in progress), 410, 413, 422 (key reused), 503 (store down); the handler's own statuses count too.",
				Queries: []Query{{Expr: "sum by (" + m.HTTPStatus + ") (" + rate(sel(m.HTTPDuration+"_count", re(m.HTTPStatus, "4..|5.."))) + ")",
					Legend: legend(m.HTTPStatus)}}},
			{Title: "gRPC problem responses, by code", Kind: TimeSeries, Unit: "reqps", Width: 12,
				Description: "gRPC calls that ended with a status other than OK, from otelgrpc's rpc.server.call.duration (install otelgrpc's server stats handler). grpcguard answers InvalidArgument (no or bad key), Aborted (in progress), FailedPrecondition (key reused), AlreadyExists, Unavailable (store down); the handler's own codes count too.",
				Queries: []Query{{Expr: "sum by (" + m.RPCStatus + ") (" + rate(sel(m.RPCDuration+"_count", ne(m.RPCStatus, "OK"))) + ")",
					Legend: legend(m.RPCStatus)}}},
		}},
	}
}

// Exprs returns every query expression of rows, in order.
func Exprs(rows []Row) []string {
	var out []string
	for _, r := range rows {
		for _, p := range r.Panels {
			for _, q := range p.Queries {
				out = append(out, q.Expr)
			}
		}
	}
	return out
}
