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
			Expr: fmt.Sprintf("sum by (%s, %s) (increase(%s[15m])) > 0",
				m.Scope, m.Store, m.ClaimTakenOver),
			For:      "0m",
			Severity: "warning",
			Summary:  "Claims of scope {{ $labels." + m.Scope + " }} were left by holders that died, and taken over",
			Meaning: "In the last 15 minutes, calls of this scope found their key held by a claim whose lease had lapsed " +
				"without a completion, and took it over (idemguard.claim.taken_over): its holder crashed, was killed, hung " +
				"past its lease, or lost the store before it recorded an outcome. The call that took over ran the function " +
				"again; if the holder had done the side effect before it stopped, the effect happened twice, unless its target " +
				"deduplicates on the idempotency key (guard.KeyFromContext). Duplicates that meet a live holder are not " +
				"stuck claims (IdemguardContention), and a claim that lapsed shows here only once a call comes back for it.",
			Runbook: "Find the takeovers in the application's logs: \"idemguard: took over a claim whose lease lapsed\", with " +
				"idemguard.scope, idemguard.key.hash and the dead holder's lease end. Look at a key (now held or completed by " +
				"the call that took over):\n" +
				"  idemguard get 'SCOPE#HASH'\n" +
				"List the claims of the scope still stuck (in progress, lease lapsed, no call back for them yet):\n" +
				"  idemguard list --scope SCOPE --stuck\n" +
				"A stuck claim needs no release for a retry: the next call with its key takes it over at once, as these did. " +
				"Release one only to clear it when no call will come back for it:\n" +
				"  idemguard release 'SCOPE#HASH'\n" +
				"Check downstream whether the effects of the keys taken over ran twice. Then find why holders died: crashes " +
				"and OOM kills, deploys that stop processes before their calls end (a shutdown grace longer than the longest " +
				"call), or pauses longer than the lease (guard.WithLease). Every state get and list show, and when release " +
				"helps rather than a retry: docs/operations.md, \"What the CLI shows\".",
		},
		{
			Name: "IdemguardContention",
			Expr: fmt.Sprintf("sum by (%[1]s) (%[2]s) / sum by (%[1]s) (%[3]s) > 0.05\nor\nsum by (%[1]s) (%[4]s) / sum by (%[1]s) (%[3]s) > 0.05",
				m.Scope, calls("5m", eq(m.Outcome, m.InProgress)), calls("5m", ne(m.Outcome, m.Unguarded)),
				"rate("+m.LockWait+"_count[5m])"),
			For:      "15m",
			Severity: "warning",
			Summary:  "Calls of scope {{ $labels." + m.Scope + " }} keep meeting a live holder of their key",
			Meaning: "For 15 minutes, more than 5% of the scope's keyed calls found their key held by a call that was still " +
				"running, its lease live: they were turned away in progress (guard.ErrInProgress; HTTP 409, gRPC Aborted; " +
				"outcome in_progress) or waited for it in Wait mode (idemguard.lock.wait). That is the guard stopping " +
				"duplicates that arrive while the first call runs: clients or brokers retry faster than the function " +
				"finishes. Nothing is stuck and no effect ran twice; claims left by holders that died are IdemguardClaimsStuck.",
			Runbook: "See which keys of the scope are held, and how long their leases run:\n" +
				"  idemguard list --scope SCOPE --status in-progress\n" +
				"  idemguard get 'SCOPE#HASH'\n" +
				"A claim whose lease is running (LEASE \"in …\") is a live call: leave it; a retry after it ends gets its " +
				"outcome. Do not release --force it: if its holder still runs, the next call runs the side effect a second " +
				"time. Make duplicates wait for the first call instead of failing (guard.WithWait, with a budget longer than " +
				"the function takes), make clients retry later (HTTP Retry-After, a consumer's nack delay), or find why the " +
				"function is slow. Every state get and list show, and when release helps rather than a retry: " +
				"docs/operations.md, \"What the CLI shows\".",
		},
		{
			Name:     "IdemguardLeaseLost",
			Expr:     fmt.Sprintf("sum by (%s, %s) (increase(%s[10m])) > 0", m.Scope, m.Store, m.LeaseLost),
			For:      "0m",
			Severity: "critical",
			Summary:  "A guarded function of scope {{ $labels." + m.Scope + " }} lost its claim while it ran",
			Meaning: "A call ran its function, and when it came to record the outcome its claim was gone " +
				"(idemguard.lease.lost, guard.ErrLeaseLost): it ran past its lease without a successful extension (a long " +
				"pause, a partition from the store) and another call took the key over, or an operator deleted the claim " +
				"(release --force). Its outcome was not recorded, and its effect may have happened twice: once by each " +
				"holder. The call that took over counted a takeover (IdemguardClaimsStuck).",
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
