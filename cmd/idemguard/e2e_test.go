package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Masks for the parts of the human output that change from run to run:
// times and durations. A duration that pads a table cell is replaced by a
// placeholder padded to the same width, so the golden files still check
// that the columns line up.
var (
	maskTime = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	maskDur  = regexp.MustCompile(`\b\d+(?:ms|[dhms])(?:\d+[hms])?\b( *)`)
)

func mask(s string) string {
	s = maskTime.ReplaceAllString(s, "<time>")
	return maskDur.ReplaceAllStringFunc(s, func(m string) string {
		rep := "<dur>"
		if strings.HasSuffix(m, " ") {
			rep += strings.Repeat(" ", max(1, len(m)-len(rep)))
		}
		return rep
	})
}

// golden compares got, masked, with testdata/NAME, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	got = mask(got)
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (masked):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// Fixed tokens, so that the golden files need not mask them.
const (
	tokenDone    = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	tokenCrashed = "c4a5be1f00000000000000000000dead"
	tokenRenewed = "4e4e4e4e11111111111111111111beef"
	tokenPayload = "7a7a7a7a22222222222222222222cafe"
)

type receipt struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// Acceptance 1: the CLI as a subprocess against each store: derive a key,
// guard a call with the library, get shows it; a crashed claim shows in
// list --stuck, release clears it and a retry then runs; a renewed claim
// is not released; --force deletes any record; golden human output,
// the --json schema, and the exit statuses.
func TestEndToEnd(t *testing.T) {
	for _, st := range e2eStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			testEndToEnd(t, st.open(t))
		})
	}
}

func testEndToEnd(t *testing.T, f e2eStore) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := []string{StoreEnv + "=" + f.url}
	run := func(code int, stdin string, args ...string) result {
		t.Helper()
		return cli(t, env, stdin, args...).want(t, code, args...)
	}
	keyOf := func(input string) string {
		t.Helper()
		return strings.TrimSpace(run(exitOK, input, "key", "--scope", "charge", "--key-path", "order.id").stdout)
	}
	g, err := guard.New(f.s)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	charge := func(input string, token string) guard.Outcome {
		t.Helper()
		opts := []guard.CallOption{guard.WithKeyPath("order.id"), guard.WithPayloadValidation("order")}
		if token != "" {
			opts = append(opts, adapt.WithClaimToken(token))
		}
		_, out, err := adapt.Execute(ctx, g, "charge", json.RawMessage(input), func(context.Context) (receipt, error) {
			runs.Add(1)
			return receipt{ID: "r-1", Amount: 1250}, nil
		}, opts...)
		if err != nil {
			t.Fatalf("guarded call: %v", err)
		}
		return out
	}

	// Derive a key, guard a call, get shows it.
	in1 := `{"order": {"id": "o-1", "amount": 1250}, "customer": "c-9"}`
	k1 := keyOf(in1)
	if want, _ := guardKey(t, nil, "charge", json.RawMessage(in1), "order.id", ""); k1 != want {
		t.Fatalf("key printed %q; the guard derives %q", k1, want)
	}
	if out := charge(in1, tokenDone); out != guard.OutcomeExecuted {
		t.Fatalf("first call: %v", out)
	}
	golden(t, "get-completed.txt", run(exitOK, "", "get", k1).stdout)
	got := checkGetJSON(t, run(exitOK, "", "get", k1, "--json").stdout)
	if got.Status != "COMPLETED" || got.State != stateLive || got.Token != tokenDone || got.PayloadHash == "" ||
		got.Result == nil || got.Result.Format != "json" || string(got.Result.Value) != `{"id":"r-1","amount":1250}` {
		t.Errorf("get --json = %+v", got)
	}

	// A crashed claim: claimed through the store with a short lease that
	// then lapses, as when a worker dies mid-call.
	in2 := `{"order": {"id": "o-2"}}`
	k2 := keyOf(in2)
	// Long enough (3 s with the 1 s skew tolerance) that the first list
	// below runs before the claim counts as lapsed, even as a subprocess
	// on a machine loaded by the rest of make test.
	lease := 2 * time.Second
	crashed := &store.Record{Key: k2, Status: store.StatusInProgress, Token: tokenCrashed,
		ExpiresAt: time.Now().Add(time.Hour), LeaseExpiresAt: time.Now().Add(lease)}
	if _, err := f.s.Acquire(ctx, crashed, time.Now()); err != nil {
		t.Fatal(err)
	}
	// And one whose holder will renew it after it lapsed.
	in3 := `{"order": {"id": "o-3"}}`
	k3 := keyOf(in3)
	renewed := &store.Record{Key: k3, Status: store.StatusInProgress, Token: tokenRenewed,
		ExpiresAt: time.Now().Add(time.Hour), LeaseExpiresAt: time.Now().Add(lease)}
	if _, err := f.s.Acquire(ctx, renewed, time.Now()); err != nil {
		t.Fatal(err)
	}
	// Not stuck while the lease runs.
	run(exitNotFound, "", "list", "--stuck")
	time.Sleep(lease + adapt.DefaultClockSkew + 200*time.Millisecond)
	if err := f.s.Extend(ctx, k3, tokenRenewed, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}

	r := run(exitOK, "", "list", "--stuck")
	golden(t, "list-stuck.txt", r.stdout)
	if !strings.Contains(r.stderr, "1 stuck claim from") || !strings.HasSuffix(r.stderr, "(1 page)\n") {
		t.Errorf("list --stuck summary: %q; want 1 stuck claim, in 1 page", r.stderr)
	}
	lines := checkListJSON(t, run(exitOK, "", "list", "--stuck", "--json").stdout)
	if len(lines) != 1 || lines[0].Key != k2 || lines[0].State != stateStuck || lines[0].Token != tokenCrashed {
		t.Errorf("list --stuck --json = %+v; want only %s, stuck", lines, k2)
	}
	all := checkListJSON(t, run(exitOK, "", "list", "--json", "--page-size", "1").stdout)
	if len(all) != 3 {
		t.Errorf("list --json listed %d records, want 3", len(all))
	}
	if done := checkListJSON(t, run(exitOK, "", "list", "--scope", "charge", "--status", "completed", "--json").stdout); len(done) != 1 || done[0].Key != k1 {
		t.Errorf("list --status completed = %+v; want %s", done, k1)
	}
	run(exitNotFound, "", "list", "--scope", "refund")
	if r := run(exitOK, "", "list", "--limit", "2"); strings.Count(r.stdout, "\n") != 3 {
		t.Errorf("list --limit 2 printed:\n%s", r.stdout)
	}

	// The renewed claim is not released; the completed record is not a
	// claim.
	r = run(exitNotFound, "", "release", k3)
	if !strings.Contains(r.stderr, "is held: lease in ") {
		t.Errorf("release of a renewed claim: %q", r.stderr)
	}
	if rec, err := f.s.Get(ctx, k3); err != nil || rec.Token != tokenRenewed || rec.Status != store.StatusInProgress {
		t.Errorf("after release refused, the renewed claim is %+v, %v", rec, err)
	}
	if r := run(exitNotFound, "", "release", k1); !strings.Contains(r.stderr, "not a stuck claim") {
		t.Errorf("release of a completed record: %q", r.stderr)
	}

	// release clears the crashed claim; its holder is fenced out; a retry
	// runs.
	r = run(exitOK, "", "release", k2)
	golden(t, "release-stuck.txt", r.stdout)
	run(exitNotFound, "", "get", k2)
	if err := f.s.Complete(ctx, &store.Record{Key: k2, Status: store.StatusCompleted, Token: tokenCrashed, ExpiresAt: time.Now().Add(time.Hour)}); !errors.Is(err, store.ErrTokenMismatch) {
		t.Errorf("the crashed holder's Complete after release = %v, want ErrTokenMismatch", err)
	}
	before := runs.Load()
	if out := charge(in2, ""); out != guard.OutcomeExecuted || runs.Load() != before+1 {
		t.Errorf("retry after release: %v, ran %d times; want executed once", out, runs.Load()-before)
	}
	run(exitNotFound, "", "release", k2+"-absent")

	// --force deletes a completed record after showing it; the next call
	// runs again.
	r = run(exitOK, "", "release", k1, "--force")
	golden(t, "release-force.txt", r.stdout)
	run(exitNotFound, "", "get", k1)
	if out := charge(in1, ""); out != guard.OutcomeExecuted {
		t.Errorf("call after --force: %v, want executed", out)
	}
	// --json reports what was deleted, and why nothing was.
	rel := checkReleaseJSON(t, run(exitOK, "", "release", k3, "--force", "--json").stdout)
	if !rel.Released || !rel.Forced || rel.Reason != "" || rel.Record == nil || rel.Record.Key != k3 || rel.Record.Token != tokenRenewed {
		t.Errorf("release --force --json = %+v", rel)
	}
	k4 := keyOf(`{"order": {"id": "o-4"}}`)
	if _, err := f.s.Acquire(ctx, &store.Record{Key: k4, Status: store.StatusInProgress, Token: "t-4",
		ExpiresAt: time.Now().Add(time.Hour), LeaseExpiresAt: time.Now().Add(time.Hour)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rel = checkReleaseJSON(t, run(exitNotFound, "", "release", k4, "--json").stdout)
	if rel.Released || rel.Forced || !strings.Contains(rel.Reason, "is held") || rel.Record == nil || rel.Record.State != stateLive {
		t.Errorf("release --json of a held claim = %+v", rel)
	}

	// A Temporal activity's result, stored as payloads by
	// activity.PayloadCodec: get shows the encoding metadata.
	_, _, err = adapt.Execute(ctx, g, "activity:Charge", json.RawMessage(`{"id":"p-1"}`), func(context.Context) (receipt, error) {
		return receipt{ID: "r-9", Amount: 7}, nil
	}, guard.WithCodec(activity.PayloadCodec{}), adapt.WithClaimToken(tokenPayload))
	if err != nil {
		t.Fatal(err)
	}
	kp, _ := guardKey(t, nil, "activity:Charge", json.RawMessage(`{"id":"p-1"}`), "", "")
	golden(t, "get-payloads.txt", run(exitOK, "", "get", kp).stdout)
	pj := checkGetJSON(t, run(exitOK, "", "get", kp, "--json").stdout)
	if pj.Result == nil || pj.Result.Format != "temporal-payloads" || len(pj.Result.Payloads) != 1 ||
		pj.Result.Payloads[0].Metadata["encoding"] != "json/plain" || string(pj.Result.Payloads[0].Value) != `{"id":"r-9","amount":7}` {
		t.Errorf("get --json of payloads = %+v", pj.Result)
	}

	// purge: PostgreSQL keeps expired rows; the others expire their own.
	expired := &store.Record{Key: "charge#expired", Status: store.StatusInProgress, Token: "t-expired",
		ExpiresAt: time.Now().Add(-time.Hour), LeaseExpiresAt: time.Now().Add(-time.Hour)}
	if _, err := f.s.Acquire(ctx, expired, time.Now().Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	var purged map[string]any
	if err := json.Unmarshal([]byte(run(exitOK, "", "purge", "--json", "--before", "3h").stdout), &purged); err != nil {
		t.Fatal(err)
	}
	_, isPurger := f.s.(store.Purger)
	if n, _ := purged["purged"].(float64); n != 0 || purged["before"] == nil || (purged["note"] != nil) == isPurger || len(purged) > 3 {
		t.Errorf("purge --json --before 3h = %v; want 0 purged (the record expired 1h ago), before, and a note only where the store expires records itself", purged)
	}
	r = run(exitOK, "", "purge")
	if isPurger {
		if !strings.HasPrefix(r.stdout, "purged 1 record that") {
			t.Errorf("purge: %q", r.stdout)
		}
		run(exitNotFound, "", "get", expired.Key)
	} else if !strings.HasPrefix(r.stdout, "nothing to purge") {
		t.Errorf("purge: %q", r.stdout)
	}

	// Usage errors are 2; so is a store that cannot be reached.
	run(exitError, "", "get")
	run(exitError, "", "list", "--status", "done")
	run(exitError, "", "list", "--stuck", "--status", "completed")
	run(exitError, "", "frobnicate")
	if r := cli(t, nil, "", "get", k1); r.code != exitError || !strings.Contains(r.stderr, "no store given") {
		t.Errorf("get without a store: %d, %q", r.code, r.stderr)
	}
	run(exitError, "", "get", k1, "--store", "redis://127.0.0.1:1")
}

// The documented --json schema (docs/cli.md): every field, its JSON type.
var recordSchema = map[string]string{
	"key":                "string",
	"status":             "string",
	"state":              "string",
	"token":              "string",
	"payload_hash":       "string",
	"expires_at":         "time",
	"expires_in_seconds": "number",
	"lease_expires_at":   "time|null",
	"lease_left_seconds": "number|null",
	"result_kind":        "string|null",
	"result_size":        "integer",
}

// checkSchema fails the test unless obj has exactly the schema's fields,
// each of its type, and the enumerated fields hold allowed values.
func checkSchema(t *testing.T, obj map[string]any, schema map[string]string) {
	t.Helper()
	for k := range obj {
		if _, ok := schema[k]; !ok {
			t.Errorf("field %q is not in the documented schema", k)
		}
	}
	for k, typ := range schema {
		v, ok := obj[k]
		if !ok {
			t.Errorf("field %q is missing", k)
			continue
		}
		okType := false
		for _, alt := range strings.Split(typ, "|") {
			switch alt {
			case "null":
				okType = okType || v == nil
			case "string":
				_, s := v.(string)
				okType = okType || s
			case "time":
				if s, isStr := v.(string); isStr {
					_, err := time.Parse(time.RFC3339Nano, s)
					okType = okType || err == nil
				}
			case "number":
				_, n := v.(float64)
				okType = okType || n
			case "integer":
				n, isNum := v.(float64)
				okType = okType || (isNum && n == float64(int64(n)) && n >= 0)
			case "object":
				_, o := v.(map[string]any)
				okType = okType || o || v == nil
			}
		}
		if !okType {
			t.Errorf("field %q = %#v, want %s", k, v, typ)
		}
	}
	enums := map[string][]string{
		"status":      {"INPROGRESS", "COMPLETED"},
		"state":       {stateLive, stateStuck, stateExpired},
		"result_kind": {"value", "error", "unavailable"},
	}
	for k, allowed := range enums {
		if v, ok := obj[k].(string); ok && !contains(allowed, v) {
			t.Errorf("field %q = %q, want one of %q", k, v, allowed)
		}
	}
	if (obj["lease_expires_at"] == nil) != (obj["lease_left_seconds"] == nil) {
		t.Errorf("lease_expires_at %v and lease_left_seconds %v: both or neither", obj["lease_expires_at"], obj["lease_left_seconds"])
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkListJSON checks each line of list --json against the schema and
// returns them decoded.
func checkListJSON(t *testing.T, out string) []recordJSON {
	t.Helper()
	var recs []recordJSON
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("list --json line %q: %v", line, err)
		}
		checkSchema(t, obj, recordSchema)
		var r recordJSON
		json.Unmarshal([]byte(line), &r)
		recs = append(recs, r)
	}
	return recs
}

// checkGetJSON checks get --json against the schema (the record's fields
// and result) and returns it decoded.
func checkGetJSON(t *testing.T, out string) getJSON {
	t.Helper()
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("get --json printed %d lines, want one object", strings.Count(out, "\n"))
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatalf("get --json %q: %v", out, err)
	}
	schema := map[string]string{"result": "object"}
	for k, v := range recordSchema {
		schema[k] = v
	}
	checkSchema(t, obj, schema)
	if res, ok := obj["result"].(map[string]any); ok {
		checkResultSchema(t, res)
	}
	var g getJSON
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// checkReleaseJSON checks release --json: exactly its four fields, the
// record against the record schema.
func checkReleaseJSON(t *testing.T, out string) releaseJSON {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatalf("release --json %q: %v", out, err)
	}
	if len(obj) != 4 || obj["released"] == nil || obj["forced"] == nil || obj["reason"] == nil || obj["record"] == nil {
		t.Errorf("release --json has fields %v; want released, forced, reason, record", obj)
	}
	if string(obj["record"]) != "null" {
		checkGetJSON(t, string(obj["record"])+"\n")
	}
	var rel releaseJSON
	if err := json.Unmarshal([]byte(out), &rel); err != nil {
		t.Fatal(err)
	}
	return rel
}

// checkResultSchema checks a result object: its format, and exactly the
// fields that format has (those after "|" optional).
func checkResultSchema(t *testing.T, res map[string]any) {
	t.Helper()
	fields := map[string]string{
		"json":              "format value",
		"http-response":     "format status header|value text base64 trailer",
		"grpc-message":      "format type|value base64",
		"grpc-status":       "format value",
		"temporal-failure":  "format value",
		"temporal-payloads": "format payloads",
		"base64":            "format base64",
	}
	format, _ := res["format"].(string)
	spec, ok := fields[format]
	if !ok {
		t.Fatalf("result format %q, want one of json, http-response, grpc-message, grpc-status, temporal-failure, temporal-payloads, base64", format)
	}
	required, optional, _ := strings.Cut(spec, "|")
	allowed := map[string]bool{}
	for _, f := range strings.Fields(required) {
		allowed[f] = true
		if _, ok := res[f]; !ok {
			t.Errorf("result of format %s lacks %q", format, f)
		}
	}
	for _, f := range strings.Fields(optional) {
		allowed[f] = true
	}
	for f := range res {
		if !allowed[f] {
			t.Errorf("result of format %s has field %q", format, f)
		}
	}
	if format != "temporal-payloads" {
		return
	}
	pls, _ := res["payloads"].([]any)
	for _, p := range pls {
		pm, _ := p.(map[string]any)
		md, isMap := pm["metadata"].(map[string]any)
		_, hasSize := pm["size"].(float64)
		_, hasValue := pm["value"]
		_, hasB64 := pm["base64"].(string)
		if !isMap || md["encoding"] == nil || !hasSize || hasValue == hasB64 || len(pm) != 3 {
			t.Errorf("payload %v: want metadata with an encoding, size, and one of value or base64", pm)
		}
	}
}
