// Command mutants is the project's mutation check (make mutants): it puts
// each deliberate bug of its list into a copy of the working tree, one at a
// time, runs the nets that exist to catch it, and fails unless every net
// named for every mutant fails on the mutated tree.
//
// A mutant is a set of anchored edits (old text → new text in a file). An
// anchor that is not found exactly as often as expected is an error, not a
// skipped mutant: a refactor must re-anchor the mutant, never retire it in
// silence (TestAnchors checks every anchor in make test, without servers).
// A mutant that does not build is an error too, not a catch.
//
// The nets are the store conformance and linearizability suites
// (store/<name>), the composition suite through an entry point's tests
// (compose/<entry point>/<store>) and short control runs of the chaos
// suite (chaos/control/<store>); docs/chaos.md lists which nets each
// mutant names. Before the mutants, every net they name runs once on the
// unmutated copy and must pass (a net that fails anyway proves nothing),
// and so does the linearizability checker's own mutation test
// (TestLinearizableMutants of every store).
//
// It needs the servers of scripts/harness.sh in its environment:
//
//	CI=true scripts/harness.sh run go run ./tools/mutants             # what make mutants runs
//	go run ./tools/mutants -list                                       # the mutants and their nets
//	CI=true scripts/harness.sh run go run ./tools/mutants -run 'memory' -baseline=false
//
// Run from anywhere inside the repository.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	runFlag := flag.String("run", "", "only the mutants whose names match this regular expression")
	list := flag.Bool("list", false, "list the mutants and their nets, and exit")
	baseline := flag.Bool("baseline", true, "first run every net named, and the checker's mutation test, on the unmutated copy")
	keep := flag.Bool("keep", false, "keep the copy of the tree and the nets' logs")
	timeout := flag.Duration("net-timeout", 15*time.Minute, "how long one net may run")
	flag.Parse()

	if err := run(*runFlag, *list, *baseline, *keep, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func run(pattern string, list, baseline, keep bool, timeout time.Duration) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return fmt.Errorf("-run: %w", err)
	}
	all := nets()
	var chosen []Mutant
	for _, m := range allMutants() {
		if re.MatchString(m.Name) {
			chosen = append(chosen, m)
		}
	}
	if err := check(root, allMutants(), all); err != nil {
		return err
	}
	if list {
		for _, m := range chosen {
			fmt.Printf("%-34s %s\n", m.Name, strings.Join(m.Nets, ", "))
		}
		return nil
	}
	if len(chosen) == 0 {
		return fmt.Errorf("no mutant matches %q", pattern)
	}

	began := time.Now()
	work, err := os.MkdirTemp("", "idemguard-mutants-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Printf("mutants: the copy and the logs are in %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	tree := filepath.Join(work, "tree")
	if err := copyTree(root, tree); err != nil {
		return err
	}
	r := &runner{tree: tree, logs: filepath.Join(work, "logs"), timeout: timeout}
	if err := os.MkdirAll(r.logs, 0o755); err != nil {
		return err
	}

	if baseline {
		var names []string
		for _, m := range chosen {
			for _, n := range m.Nets {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
		slices.Sort(names)
		for _, n := range append([]Net{checkerNet}, pick(all, names)...) {
			failed, d, log, err := r.net("clean", n)
			if err != nil {
				return err
			}
			if failed {
				return fmt.Errorf("net %s fails on the unmutated tree (%v); a net that fails anyway catches nothing:\n%s", n.Name, d, tail(log))
			}
			fmt.Printf("clean tree: %-26s passes (%v)\n", n.Name, d)
		}
	}

	var survived []string
	for _, m := range chosen {
		restore, err := apply(tree, m)
		if err != nil {
			return err
		}
		for _, n := range pick(all, m.Nets) {
			if err := r.build(m.Name, n); err != nil {
				restore()
				return err
			}
			failed, d, log, err := r.net(m.Name, n)
			if err != nil {
				restore()
				return err
			}
			if failed {
				fmt.Printf("%-34s caught by %-26s (%v): %s\n", m.Name, n.Name, d, reason(log))
				continue
			}
			fmt.Printf("%-34s SURVIVED %-26s (%v)\n%s\n", m.Name, n.Name, d, tail(log))
			survived = append(survived, m.Name+" in "+n.Name)
		}
		if err := restore(); err != nil {
			return err
		}
	}
	fmt.Printf("mutants: %d mutants in %v\n", len(chosen), time.Since(began).Round(time.Second))
	if len(survived) > 0 {
		return fmt.Errorf("a net named for a mutant passed on it (docs/chaos.md says it catches it):\n  %s", strings.Join(survived, "\n  "))
	}
	fmt.Println("mutants: every mutant caught by every net named for it")
	return nil
}

// pick returns the nets named, in order.
func pick(all map[string]Net, names []string) []Net {
	out := make([]Net, 0, len(names))
	for _, n := range names {
		out = append(out, all[n])
	}
	return out
}

// check verifies the definitions against the tree at root: every net
// named exists, every name is unique, and every anchor occurs as often as
// its edit says.
func check(root string, ms []Mutant, all map[string]Net) error {
	var errs []error
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[m.Name] {
			errs = append(errs, fmt.Errorf("mutant %s defined twice", m.Name))
		}
		seen[m.Name] = true
		if len(m.Edits) == 0 || len(m.Nets) == 0 {
			errs = append(errs, fmt.Errorf("mutant %s: no edit or no net", m.Name))
		}
		for _, n := range m.Nets {
			if _, ok := all[n]; !ok {
				errs = append(errs, fmt.Errorf("mutant %s: no net %q", m.Name, n))
			}
		}
		for _, e := range m.Edits {
			b, err := os.ReadFile(filepath.Join(root, e.File))
			if err != nil {
				errs = append(errs, fmt.Errorf("mutant %s: %w", m.Name, err))
				continue
			}
			if err := e.check(string(b)); err != nil {
				errs = append(errs, fmt.Errorf("mutant %s: %w", m.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// check reports whether src holds the edit's anchor as often as it must.
func (e Edit) check(src string) error {
	if e.Old == e.New {
		return fmt.Errorf("%s: the edit changes nothing", e.File)
	}
	if n := strings.Count(src, e.Old); n != e.times() {
		return fmt.Errorf("%s: the anchor occurs %d times, not %d; re-anchor the mutant on the code as it is now (tools/mutants/mutants.go, docs/chaos.md):\n%s",
			e.File, n, e.times(), indent(e.Old))
	}
	return nil
}

// apply makes m's edits in tree, and returns the function that undoes
// them.
func apply(tree string, m Mutant) (restore func() error, err error) {
	saved := map[string][]byte{}
	restore = func() error {
		var errs []error
		for f, b := range saved {
			errs = append(errs, os.WriteFile(f, b, 0o644))
		}
		return errors.Join(errs...)
	}
	for _, e := range m.Edits {
		f := filepath.Join(tree, e.File)
		b, err := os.ReadFile(f)
		if err != nil {
			restore()
			return nil, fmt.Errorf("mutant %s: %w", m.Name, err)
		}
		if err := e.check(string(b)); err != nil {
			restore()
			return nil, fmt.Errorf("mutant %s: %w", m.Name, err)
		}
		if _, ok := saved[f]; !ok {
			saved[f] = b
		}
		if err := os.WriteFile(f, []byte(strings.ReplaceAll(string(b), e.Old, e.New)), 0o644); err != nil {
			restore()
			return nil, err
		}
	}
	return restore, nil
}

// runner runs nets in the copy of the tree.
type runner struct {
	tree, logs string
	timeout    time.Duration
}

// build builds the net's package on the mutated tree: a mutant that does
// not compile would fail every net without being caught by any.
func (r *runner) build(mutant string, n Net) error {
	args := []string{"build", "-o", os.DevNull, n.Build}
	if n.Test {
		args = []string{"test", "-c", "-o", os.DevNull, n.Build}
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = r.tree
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("mutant %s does not build (%s): %v\n%s", mutant, n.Build, err, out)
	}
	return nil
}

// net runs n and reports whether it failed, how long it took and its
// output. err is for what stopped the net from running at all.
func (r *runner) net(label string, n Net) (failed bool, d time.Duration, log []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", n.Args...)
	cmd.Dir = r.tree
	cmd.Env = append(os.Environ(), "CI=true")
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err = cmd.Run()
	d = time.Since(began).Round(time.Second)
	name := strings.NewReplacer("/", "_").Replace(label + "--" + n.Name)
	os.WriteFile(filepath.Join(r.logs, name+".log"), out.Bytes(), 0o644)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false, d, out.Bytes(), nil
	case errors.As(err, &exit), ctx.Err() != nil:
		return true, d, out.Bytes(), nil
	}
	return false, d, out.Bytes(), fmt.Errorf("running %s: %w", n.Name, err)
}

// repoRoot returns the directory holding go.work, from the working
// directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the repository (no go.work above the working directory)")
		}
		dir = parent
	}
}

// copyTree copies the working tree at root — the files git tracks and the
// untracked ones it does not ignore, as they are on disk — to dst.
func copyTree(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("listing the working tree: %w", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" {
			continue
		}
		if err := copyFile(filepath.Join(root, f), filepath.Join(dst, f)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // deleted in the working tree
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}

// A net's output says why it failed in a chaos run's violation or a
// test's error; a failed test prints its logs too, so a line that reads
// like an error is preferred to the first line a test printed.
var (
	violation = regexp.MustCompile(`(?m)^\s*(VIOLATION: .*)$`)
	testError = regexp.MustCompile(`(?mi)^\s*(\S+\.go:\d+: .*(want|NOT LINEARIZABLE|fail|unexpected|got).*)$`)
	testLine  = regexp.MustCompile(`(?m)^\s*(\S+\.go:\d+: .*)$`)
)

// reason returns the line of a net's output that says why it failed, cut
// to a line's width.
func reason(log []byte) string {
	var m [][]byte
	for _, re := range []*regexp.Regexp{violation, testError, testLine} {
		if m = re.FindSubmatch(log); m != nil {
			break
		}
	}
	if m == nil {
		return "(no test error or violation in its output; see its log)"
	}
	r := string(m[1])
	if len(r) > 160 {
		r = r[:160] + "…"
	}
	return r
}

// tail returns the last lines of a net's output.
func tail(b []byte) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return indent(strings.Join(lines, "\n"))
}

func indent(s string) string {
	return "\t" + strings.ReplaceAll(s, "\n", "\n\t")
}
