package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Every mutant's anchors are in the tree as often as its edits say, and
// every net it names exists: a refactor that moves the code under a mutant
// fails here, in make test, rather than retiring the mutant unseen.
func TestAnchors(t *testing.T) {
	if err := check(root(t), allMutants(), nets()); err != nil {
		t.Fatal(err)
	}
}

// An anchor that is missing, or found more often than its edit says, is an
// error of check and of apply, and apply leaves the file as it was.
func TestMissingAnchorFailsLoudly(t *testing.T) {
	dir := t.TempDir()
	const src = "package p\n\nfunc f() int { return 1 }\n\nfunc g() int { return 1 }\n"
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	all := map[string]Net{"n": {Name: "n"}}
	for _, e := range []Edit{
		{File: "p.go", Old: "return 2", New: "return 3"},           // gone
		{File: "p.go", Old: "return 1", New: "return 3"},           // twice, one expected
		{File: "p.go", Old: "return 1", New: "return 3", Count: 3}, // twice, three expected
		{File: "q.go", Old: "return 1", New: "return 3"},           // no file
	} {
		m := Mutant{Name: "m", Edits: []Edit{{File: "p.go", Old: "func f", New: "func h"}, e}, Nets: []string{"n"}}
		if err := check(dir, []Mutant{m}, all); err == nil {
			t.Errorf("check accepted %+v", e)
		}
		if _, err := apply(dir, m); err == nil {
			t.Errorf("apply accepted %+v", e)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "p.go")); string(b) != src {
			t.Fatalf("apply left p.go changed after failing on %+v:\n%s", e, b)
		}
	}

	m := Mutant{Name: "m", Edits: []Edit{{File: "p.go", Old: "return 1", New: "return 3", Count: 2}}, Nets: []string{"n"}}
	restore, err := apply(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "p.go")); strings.Count(string(b), "return 3") != 2 {
		t.Errorf("apply did not replace both occurrences:\n%s", b)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "p.go")); string(b) != src {
		t.Errorf("restore left:\n%s", b)
	}
	if err := check(dir, []Mutant{{Name: "m", Edits: m.Edits, Nets: []string{"other"}}}, all); err == nil {
		t.Error("check accepted a net that does not exist")
	}
}

// table returns the rows of the table in section of doc whose header
// starts with head, each as its cells, with `\|` read as |.
func table(t *testing.T, doc, section, head string) [][]string {
	t.Helper()
	i := strings.Index(doc, "\n## "+section+"\n")
	if i < 0 {
		t.Fatalf("docs/chaos.md has no section %q", section)
	}
	body := doc[i+1:]
	if j := strings.Index(body[3:], "\n## "); j >= 0 {
		body = body[:j+3]
	}
	var rows [][]string
	in := false
	for _, line := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(line, head):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "|"):
			line = strings.ReplaceAll(line, `\|`, "\x00")
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for k := range cells {
				cells[k] = strings.TrimSpace(strings.ReplaceAll(cells[k], "\x00", "|"))
			}
			rows = append(rows, cells)
		case in:
			in = false
		}
	}
	if len(rows) == 0 {
		t.Fatalf("docs/chaos.md, %q: no table headed %q", section, head)
	}
	return rows
}

// code returns the code spans of a cell.
func code(cell string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// docs/chaos.md's tables of mutants, nets and the checker's mutants are
// the definitions': the same mutants in the same order, each with its
// files and nets, each net with its command.
func TestTables(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root(t), "docs", "chaos.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	const section = "What the nets catch"

	rows := table(t, doc, section, "| mutant |")
	ms := allMutants()
	if len(rows) != len(ms) {
		t.Errorf("the mutant table has %d rows, the definitions %d mutants", len(rows), len(ms))
	}
	for i := range min(len(rows), len(ms)) {
		r, m := rows[i], ms[i]
		if len(r) != 4 {
			t.Errorf("row %d: %d cells, want 4 (mutant, bug, files, nets)", i+1, len(r))
			continue
		}
		var files []string
		for _, e := range m.Edits {
			if !slices.Contains(files, e.File) {
				files = append(files, e.File)
			}
		}
		if got := code(r[0]); len(got) != 1 || got[0] != m.Name {
			t.Errorf("row %d names %v, the definitions %s", i+1, got, m.Name)
		}
		if got := code(r[2]); !slices.Equal(got, files) {
			t.Errorf("%s: the table edits %v, the definition %v", m.Name, got, files)
		}
		if got := code(r[3]); !slices.Equal(got, m.Nets) {
			t.Errorf("%s: the table names the nets %v, the definition %v", m.Name, got, m.Nets)
		}
	}

	all := nets()
	var names []string
	for n := range all {
		names = append(names, n)
	}
	slices.Sort(names)
	names = append(names, checkerNet.Name)
	rows = table(t, doc, section, "| net |")
	if len(rows) != len(names) {
		t.Errorf("the net table has %d rows, the definitions %d nets", len(rows), len(names))
	}
	for i := range min(len(rows), len(names)) {
		n := all[names[i]]
		if names[i] == checkerNet.Name {
			n = checkerNet
		}
		want := "go " + strings.Join(n.Args, " ")
		if len(rows[i]) != 2 {
			t.Errorf("net row %d: %d cells, want 2 (net, command)", i+1, len(rows[i]))
			continue
		}
		if got := code(rows[i][0]); len(got) != 1 || got[0] != n.Name {
			t.Errorf("net row %d names %v, the definitions %s", i+1, got, n.Name)
		}
		if got := code(rows[i][1]); len(got) != 1 || got[0] != want {
			t.Errorf("net %s: the table runs %v, the definition %q", n.Name, got, want)
		}
	}

	// The checker's own mutants, as package linz defines them.
	src, err := os.ReadFile(filepath.Join(root(t), "internal", "testing", "linz", "mutants.go"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range regexp.MustCompile(`(?m)^\t\{"(\w+)", func`).FindAllStringSubmatch(string(src), -1) {
		want = append(want, m[1])
	}
	if len(want) == 0 {
		t.Fatal("no mutant found in internal/testing/linz/mutants.go")
	}
	var got []string
	for _, r := range table(t, doc, section, "| checker mutant |") {
		got = append(got, code(r[0])...)
	}
	if !slices.Equal(got, want) {
		t.Errorf("the checker's mutants in docs/chaos.md are %v, in internal/testing/linz/mutants.go %v", got, want)
	}
}

// A catch is reported with the first violation or test error of the net's
// output.
func TestReason(t *testing.T) {
	for _, c := range []struct{ log, want string }{
		{"chaos run: FAIL\n  payloads: 1 violations\n  VIOLATION: op 1: not refused\n  VIOLATION: op 2\n", "VIOLATION: op 1: not refused"},
		{"=== RUN   TestX\n        holders.go:79: a call that rejects = ok\n--- FAIL: TestX\n", "holders.go:79: a call that rejects = ok"},
		{"    x_test.go:21: recorded 40 operations\n    x.go:80: NOT LINEARIZABLE: 40 operations\n", "x.go:80: NOT LINEARIZABLE: 40 operations"},
		{"    x_test.go:21: recorded 40 operations\n--- FAIL: TestX\n", "x_test.go:21: recorded 40 operations"},
		{"exit status 1\n", "(no test error or violation in its output; see its log)"},
	} {
		if got := reason([]byte(c.log)); got != c.want {
			t.Errorf("reason(%q) = %q, want %q", c.log, got, c.want)
		}
	}
}
