package main

// The mutants and the nets that must catch them. docs/chaos.md carries the
// same two tables ("What the nets catch"); TestTables keeps them in step,
// and TestAnchors requires every anchor to be in the tree, so that a
// refactor that moves the code a mutant edits fails `make test` instead of
// retiring the mutant in silence.

// An Edit replaces Old with New in File (relative to the repository root).
// Old must occur exactly Count times (1 when Count is 0); every occurrence
// is replaced.
type Edit struct {
	File  string
	Old   string
	New   string
	Count int
}

// times returns how many occurrences of Old the edit expects.
func (e Edit) times() int {
	if e.Count == 0 {
		return 1
	}
	return e.Count
}

// A Mutant is a deliberate bug: edits to the tree, and the nets that must
// each fail on the tree so edited.
type Mutant struct {
	Name  string
	Bug   string // what the bug does, as the docs' table says it
	Edits []Edit
	Nets  []string // names in nets
}

// A Net is a command run from the root of the tree's copy, with the
// harness's servers in its environment. It catches a mutant when it exits
// with a failure on the mutated tree, having built.
type Net struct {
	Name string
	Args []string // the go command's arguments
	// Build is the package whose build (tests included, for go test)
	// must succeed on the mutated tree before the net runs, so that a
	// mutant that does not compile is an error of the harness rather
	// than a catch.
	Build string
	Test  bool // Build is a go test package (built with go test -c)
}

// storeNet runs a store's conformance and linearizability suites.
func storeNet(s string) Net {
	return Net{Name: "store/" + s, Test: true, Build: "./store/" + s + "/",
		Args: []string{"test", "-count=1", "-run", "^(TestConformance|TestLinearizable)$", "./store/" + s + "/"}}
}

// composeNet runs the composition suite of one entry point on one store.
func composeNet(entry, test, pkg, s string) Net {
	return Net{Name: "compose/" + entry + "/" + s, Test: true, Build: pkg,
		Args: []string{"test", "-count=1", "-run", "^" + test + "$/^" + s + "$", pkg}}
}

// chaosNet runs a short control run of the chaos suite on a store: no
// kills, pauses or faults, so any extra run, lost lease or lease-lost
// report is a violation.
func chaosNet(s string) Net {
	args := []string{"run", "./chaos/cmd/chaos", "-short", "-control", "-workflows", "15"}
	if s != "dynamodb" {
		args = append(args, "-store", s)
	}
	return Net{Name: "chaos/control/" + s, Build: "./chaos/cmd/chaos", Args: args}
}

// checkerNet runs the linearizability checker's own mutants (package
// internal/testing/linz: stores wrapped to forge the writes a broken condition lets
// through) on every store. It must pass: the test fails if the checker
// misses one.
var checkerNet = Net{Name: "checker", Test: true, Build: "./internal/testing/linz/",
	Args: []string{"test", "-count=1", "-run", "^TestLinearizableMutants$", "./store/memory/", "./store/dynamodb/", "./store/redis/", "./store/postgres/"}}

// stores are the stores every store mutant is made for.
var stores = []string{"memory", "dynamodb", "redis", "postgres"}

// nets returns every net by name.
func nets() map[string]Net {
	m := map[string]Net{}
	add := func(n Net) { m[n.Name] = n }
	for _, s := range stores {
		add(storeNet(s))
		add(composeNet("Do", "TestCompositionDo", "./guard/guardtest/", s))
	}
	add(composeNet("HTTP", "TestCompositionHTTP", "./httpguard/", "memory"))
	add(composeNet("DoTx", "TestCompositionDoTx", "./store/postgres/", "postgres"))
	for _, s := range []string{"dynamodb", "redis", "postgres"} {
		add(chaosNet(s))
	}
	return m
}

// storeMutants are the mutants of each store: a claim that takes over a
// live claim, a completion and a release that ignore the claim token.
func storeMutants() []Mutant {
	return []Mutant{
		{
			Name: "ClaimTakesOverLive/memory",
			Bug:  "a claim takes over a claim in progress whose lease is live",
			Edits: []Edit{{File: "store/memory/memory.go",
				Old: "if ok && old.Live(now) {",
				New: "if ok && old.Live(now) && old.Status != store.StatusInProgress {"}},
			Nets: []string{"store/memory", "compose/Do/memory"},
		},
		{
			Name: "ClaimTakesOverLive/dynamodb",
			Bug:  "a claim takes over a claim in progress whose lease is live",
			Edits: []Edit{{File: "store/dynamodb/expr.go",
				Old: `			expression.And(
				name(c.statusAttr).Equal(value(v[slotInProgress])),
				expression.AttributeExists(name(c.leaseAttr)),
				name(c.leaseAttr).LessThanEqual(value(v[slotNowMillis])),
			))`,
				New: `			name(c.statusAttr).Equal(value(v[slotInProgress])))`}},
			Nets: []string{"store/dynamodb", "compose/Do/dynamodb"},
		},
		{
			Name: "ClaimTakesOverLive/redis",
			Bug:  "a claim takes over a claim in progress whose lease is live",
			Edits: []Edit{{File: "store/redis/scripts.go",
				Old: "if lease ~= nil and lease <= now then",
				New: "if lease ~= nil then"}},
			Nets: []string{"store/redis", "compose/Do/redis", "chaos/control/redis"},
		},
		{
			Name: "ClaimTakesOverLive/postgres",
			Bug:  "a claim takes over a claim in progress whose lease is live",
			Edits: []Edit{
				{File: "store/postgres/table.go",
					Old: "WHERE key = $1 AND expires_at > $6 AND (status <> 'INPROGRESS' OR lease_expires_at IS NULL OR lease_expires_at > $6)",
					New: "WHERE key = $1 AND expires_at > $6 AND status <> 'INPROGRESS'"},
				{File: "store/postgres/table.go", Count: 2,
					Old: "WHERE t.expires_at <= $6 OR (t.status = 'INPROGRESS' AND t.lease_expires_at <= $6)",
					New: "WHERE t.expires_at <= $6 OR t.status = 'INPROGRESS'"},
			},
			Nets: []string{"store/postgres", "compose/Do/postgres", "compose/DoTx/postgres", "chaos/control/postgres"},
		},
		{
			Name: "CompleteIgnoresToken/memory",
			Bug:  "a completion writes over whoever holds the claim",
			Edits: []Edit{{File: "store/memory/memory.go",
				Old: "if old, ok := s.records[rec.Key]; !ok || old.Token != rec.Token {",
				New: "if _, ok := s.records[rec.Key]; !ok {"}},
			Nets: []string{"store/memory", "compose/Do/memory"},
		},
		{
			Name: "CompleteIgnoresToken/dynamodb",
			Bug:  "a completion writes over whoever holds the claim",
			Edits: []Edit{{File: "store/dynamodb/expr.go",
				Old: "cond := name(c.tokenAttr).Equal(value(token))\n\treturn expression.NewBuilder().WithCondition(cond).WithUpdate(upd)",
				New: "cond := expression.AttributeExists(name(c.keyAttr))\n\treturn expression.NewBuilder().WithCondition(cond).WithUpdate(upd)"}},
			Nets: []string{"store/dynamodb", "compose/Do/dynamodb"},
		},
		{
			Name: "CompleteIgnoresToken/redis",
			Bug:  "a completion writes over whoever holds the claim",
			Edits: []Edit{{File: "store/redis/scripts.go",
				Old: "const completeLua = heldPrelude + `",
				New: "const completeLua = `\nif redis.call('TYPE', KEYS[1]).ok ~= 'hash' then\n  return 0\nend"}},
			Nets: []string{"store/redis", "compose/Do/redis"},
		},
		{
			Name: "CompleteIgnoresToken/postgres",
			Bug:  "a completion writes over whoever holds the claim",
			Edits: []Edit{{File: "store/postgres/table.go", Count: 2,
				Old: "WHERE key = $1 AND token = $2`),",
				New: "WHERE key = $1 AND $2::text IS NOT NULL`),"}},
			Nets: []string{"store/postgres", "compose/Do/postgres", "compose/DoTx/postgres"},
		},
		{
			Name: "ReleaseIgnoresToken/memory",
			Bug:  "a release deletes whoever's claim is in progress",
			Edits: []Edit{{File: "store/memory/memory.go",
				Old: "if old, ok := s.records[key]; !ok || old.Token != token || old.Status != store.StatusInProgress {",
				New: "if old, ok := s.records[key]; !ok || old.Status != store.StatusInProgress {"}},
			Nets: []string{"store/memory"},
		},
		{
			Name: "ReleaseIgnoresToken/dynamodb",
			Bug:  "a release deletes whoever's claim is in progress",
			Edits: []Edit{{File: "store/dynamodb/expr.go",
				Old: "cond := name(c.tokenAttr).Equal(value(token)).\n\t\tAnd(name(c.statusAttr).Equal(value(inProgress)))\n\treturn expression.NewBuilder().WithCondition(cond)\n}",
				New: "cond := name(c.statusAttr).Equal(value(inProgress))\n\treturn expression.NewBuilder().WithCondition(cond)\n}"}},
			Nets: []string{"store/dynamodb"},
		},
		{
			Name: "ReleaseIgnoresToken/redis",
			Bug:  "a release deletes whoever's claim is in progress",
			Edits: []Edit{{File: "store/redis/scripts.go",
				Old: "const releaseLua = heldPrelude + `",
				New: "const releaseLua = `\nif redis.call('TYPE', KEYS[1]).ok ~= 'hash' then\n  return 0\nend"}},
			Nets: []string{"store/redis"},
		},
		{
			Name: "ReleaseIgnoresToken/postgres",
			Bug:  "a release deletes whoever's claim is in progress",
			Edits: []Edit{{File: "store/postgres/table.go",
				Old: "DELETE FROM $T WHERE key = $1 AND token = $2 AND status = 'INPROGRESS'",
				New: "DELETE FROM $T WHERE key = $1 AND $2::text IS NOT NULL AND status = 'INPROGRESS'"}},
			Nets: []string{"store/postgres"},
		},
	}
}

// guardMutants are the mutants of the guard.
func guardMutants() []Mutant {
	return []Mutant{
		{
			Name: "LeaseKeeperNeverExtends",
			Bug:  "the lease keeper never extends a claim (nor ends the function's context at the lease end)",
			Edits: []Edit{{File: "guard/lease.go",
				Old: "\tk.arm(first)\n}",
				New: "\t_ = first\n}"}},
			Nets: []string{"chaos/control/dynamodb"},
		},
		{
			Name: "PayloadUncheckedWhenCompleted",
			Bug:  "payload validation is skipped for a completed record: a key reused with another payload replays",
			Edits: []Edit{{File: "guard/derive.go",
				Old: "if d.validate != \"\" && rec.PayloadHash != hash {",
				New: "if d.validate != \"\" && rec.PayloadHash != hash && rec.Status != store.StatusCompleted {"}},
			Nets: []string{"compose/Do/memory", "compose/HTTP/memory", "chaos/control/dynamodb"},
		},
		{
			Name: "StepKeyDropsValidation",
			Bug:  "a step's derived key drops the call's payload validation: a step replays to another payload",
			Edits: []Edit{{File: "guard/derive.go",
				Old: "s := derived{scope: scope, payloadHash: d.payloadHash, validate: d.validate}",
				New: "s := derived{scope: scope}"}},
			Nets: []string{"compose/Do/memory", "compose/HTTP/memory"},
		},
	}
}

// allMutants returns every mutant, the guard's first.
func allMutants() []Mutant {
	return append(guardMutants(), storeMutants()...)
}
