package dashboards

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Alert is one Prometheus alerting rule, with the runbook an operator
// follows when it fires.
type Alert struct {
	Name     string
	Expr     string
	For      string // how long the condition must hold, e.g. "10m"
	Severity string // "warning" or "critical"
	Summary  string // one line, with the alert's labels
	Meaning  string // what firing means
	Runbook  string // what to do: the idemguard CLI commands that find and clear the cause
}

// Alerts returns the alert rules for the names in m. Their windows are
// fixed (5m, 10m, 15m): Prometheus evaluates rules without Grafana's
// variables.
func Alerts(m Metrics) []Alert {
	calls := func(window string, matchers ...string) string {
		return "rate(" + sel(m.Calls, matchers...) + "[" + window + "])"
	}
	return []Alert{
		{
			Name: "IdemguardClaimsStuck",
			Expr: fmt.Sprintf("sum by (%s, %s) (increase(%s[15m])) > 10",
				m.Scope, m.Store, sel(m.Calls, eq(m.Outcome, m.InProgress))),
			For:      "15m",
			Severity: "warning",
			Summary:  "Calls of scope {{ $labels." + m.Scope + " }} keep finding their keys in progress",
			Meaning: "For 15 minutes, more than 10 calls every 15 minutes were turned away because another call held their key. " +
				"Either a function of this scope runs far longer than its callers retry, or claims were left behind by " +
				"processes that died: such a claim blocks its key until its lease lapses (a call then takes it over), and " +
				"a claim without a lease blocks it until the record expires.",
			Runbook: "List the scope's claims and the stuck ones (in progress, lease lapsed):\n" +
				"  idemguard list --scope SCOPE --status in-progress\n" +
				"  idemguard list --scope SCOPE --stuck\n" +
				"Look at one (its lease end, its expiry, its token):\n" +
				"  idemguard get 'SCOPE#HASH'\n" +
				"Release a stuck claim, so that the next call runs at once (it refuses a claim whose lease is running):\n" +
				"  idemguard release 'SCOPE#HASH'\n" +
				"Use release --force only for a claim whose holder you know is gone: if it still runs, the effect may run twice. " +
				"If live claims are simply long, raise the callers' retry interval or the guard's wait budget (guard.WithWait).",
		},
		{
			Name:     "IdemguardLeaseLost",
			Expr:     "sum(increase(" + m.LeaseLost + "[10m])) > 0",
			For:      "0m",
			Severity: "critical",
			Summary:  "A guarded function lost its claim to another caller while it ran",
			Meaning: "A function ran past its lease without a successful extension (a long pause, a partition from the store), " +
				"another caller took the key over, and the first call's outcome was not recorded (guard.ErrLeaseLost). " +
				"Its effect may have happened twice: once by each holder.",
			Runbook: "Find the key in the application's logs: the guard logs \"idemguard: lease lost to another caller\" with " +
				"idemguard.scope and idemguard.key.hash. See what the record holds now (the outcome of the caller that took over):\n" +
				"  idemguard get 'SCOPE#HASH'\n" +
				"Check the effect downstream (was it done twice?) and compensate if so. Then raise the lease above the " +
				"function's longest pause (guard.WithLease), or find what stalls the process. Look for claims left behind:\n" +
				"  idemguard list --stuck",
		},
		{
			Name: "IdemguardPayloadMismatches",
			Expr: fmt.Sprintf("sum by (%[1]s) (%[2]s) / sum by (%[1]s) (%[3]s) > 0.01",
				m.Scope, calls("5m", eq(m.Outcome, m.PayloadMismatch)), calls("5m", ne(m.Outcome, m.Unguarded))),
			For:      "10m",
			Severity: "warning",
			Summary:  "More than 1% of the calls of scope {{ $labels." + m.Scope + " }} reuse a key with another payload",
			Meaning: "Calls were refused (guard.ErrPayloadMismatch; HTTP 422, gRPC FailedPrecondition) because their key was first " +
				"used with a different payload. A client reuses idempotency keys for different requests, or the key path " +
				"selects too little of the input, so that different requests get one key.",
			Runbook: "Take the input of a refused call and derive its key and payload hash as the guard does:\n" +
				"  idemguard key --scope SCOPE --key-path 'EXPR' --validate 'EXPR' input.json\n" +
				"Compare the payload hash with the stored record's:\n" +
				"  idemguard get 'SCOPE#HASH'\n" +
				"If the client is wrong, fix its key generation; if the key path is too narrow, widen it (guard.WithKeyPath). " +
				"Only when the stored record itself is wrong, delete it so the next call runs again:\n" +
				"  idemguard release --force 'SCOPE#HASH'",
		},
		{
			Name: "IdemguardStoreErrors",
			Expr: fmt.Sprintf("sum by (%[1]s) (%[2]s) / sum by (%[1]s) (%[3]s) > 0.01",
				m.Store, calls("5m", eq(m.Outcome, m.Error), re(m.ErrorType, "store|not_recorded")), calls("5m")),
			For:      "5m",
			Severity: "critical",
			Summary:  "More than 1% of guarded calls fail on the {{ $labels." + m.Store + " }} store",
			Meaning: "Calls failed because the store could not be reached or refused them: a claim could not be written " +
				"(error.type store; HTTP 503, gRPC Unavailable), or a function ran and its outcome could not be recorded " +
				"(not_recorded), which leaves a claim until its lease lapses.",
			Runbook: "Check that the CLI reaches the store with the application's settings (exit status 2 and the store's " +
				"message on a store error: unreachable, missing table, refused credentials):\n" +
				"  idemguard list --limit 1\n" +
				"If the table is missing, create it (DynamoDB, PostgreSQL):\n" +
				"  idemguard create-table\n" +
				"Once the store answers, look for the claims that failed completions left behind, and release the stuck ones:\n" +
				"  idemguard list --stuck\n" +
				"  idemguard release 'SCOPE#HASH'",
		},
		{
			Name: "IdemguardClaimLatencyHigh",
			Expr: fmt.Sprintf("histogram_quantile(0.99, sum by (le, %s) (rate(%s[5m]))) > 0.25",
				m.Store, sel(m.StoreDuration+"_bucket", eq(m.Operation, "acquire"))),
			For:      "10m",
			Severity: "warning",
			Summary:  "Claims on the {{ $labels." + m.Store + " }} store take more than 250 ms (p99)",
			Meaning: "The claim, one conditional write before every guarded function runs, is slow: every guarded call waits " +
				"for it. The store is overloaded or throttled (DynamoDB capacity, PostgreSQL locks or bloat, Redis latency), " +
				"or far away.",
			Runbook: "Check the store's own latency and throttling metrics. On PostgreSQL, purge expired records (the table " +
				"keeps them until purged):\n" +
				"  idemguard purge --before 168h\n" +
				"See whether one scope dominates the claims in progress:\n" +
				"  idemguard list --status in-progress --limit 100",
		},
	}
}

// Rules returns the Prometheus rule file (YAML) of the alerts for m.
func Rules(m Metrics) ([]byte, error) {
	type rule struct {
		Alert       string            `yaml:"alert"`
		Expr        string            `yaml:"expr"`
		For         string            `yaml:"for"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	}
	type group struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	}
	var g group
	g.Name = "idemguard"
	for _, a := range Alerts(m) {
		g.Rules = append(g.Rules, rule{
			Alert:  a.Name,
			Expr:   a.Expr,
			For:    a.For,
			Labels: map[string]string{"severity": a.Severity},
			Annotations: map[string]string{
				"summary":     a.Summary,
				"description": a.Meaning,
				"runbook":     a.Runbook,
			},
		})
	}
	var buf bytes.Buffer
	buf.WriteString("# Prometheus alert rules for idemguard, generated by the dashboards module\n" +
		"# (go generate ./dashboards/...); do not edit. See docs/operations.md.\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(map[string][]group{"groups": {g}}); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// AlertExprs returns the expressions of alerts.
func AlertExprs(alerts []Alert) []string {
	var out []string
	for _, a := range alerts {
		out = append(out, strings.TrimSpace(a.Expr))
	}
	return out
}
