package examples

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/examples.md describes every example: each directory of examples/
// that holds a command (package main) has a section of its own, "## NAME:
// …", that shows how to run it (./examples/NAME).
func TestExamplesDocListsEveryExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "examples.md"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "internal" || !isCommand(t, e.Name()) {
			continue
		}
		n++
		name := e.Name()
		if !regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(name) + `:`).Match(doc) {
			t.Errorf("docs/examples.md has no section \"## %s: …\" for examples/%s", name, name)
		}
		if !strings.Contains(string(doc), "./examples/"+name) {
			t.Errorf("docs/examples.md does not show how to run examples/%s (./examples/%s)", name, name)
		}
	}
	if n < 5 {
		t.Errorf("found %d example commands in examples/; the test looks in the wrong place", n)
	}
}

// isCommand reports whether dir holds a package main.
func isCommand(t *testing.T, dir string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`(?m)^package main$`).Match(b) {
			return true
		}
	}
	return false
}
