package compattest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/internal/testing/redistest"
)

// previousRelease names the commit (or tag) of the release the rolling
// deploy starts from.
const previousRelease = "testdata/previous-release"

// TestRollingDeploy is a rolling deploy from the previous release to the
// current code on each store: the driver (driver/), built once from the
// previous release's tree (git archive of the commit previousRelease
// names) and once from this one, is run by the two builds in turn, each
// run executing fresh keys and replaying all earlier ones, then four
// processes of both builds at once on the same fresh keys, then both
// builds over every key. Every side effect is counted outside both, in
// files: each must have happened once, and each build must have replayed
// the other's records of every kind.
func TestRollingDeploy(t *testing.T) {
	// Built on the first store whose server is there, so that a run
	// without servers (make unit) skips without building.
	var (
		once    sync.Once
		bins    map[string]string
		built   bool
		buildTB = t
		// The binaries outlive the subtest that builds them: they go in
		// the directory of the whole test.
		binDir = t.TempDir()
	)
	drivers := func(t *testing.T) map[string]string {
		once.Do(func() {
			buildTB = t
			bins = buildDrivers(t, binDir)
			built = true
		})
		switch {
		case !built && buildTB.Skipped():
			t.Skipf("the drivers could not be built (see %s)", buildTB.Name())
		case !built:
			t.Fatalf("the drivers were not built (see %s)", buildTB.Name())
		}
		return bins
	}
	for _, sp := range []struct {
		name  string
		flags func(t *testing.T) []string
	}{
		{"dynamodb", func(t *testing.T) []string {
			client := dynamodbtest.NewClient(t)
			return []string{"-store", "dynamodb", "-endpoint", dynamodbtest.Endpoint(t), "-table", dynamodbtest.NewTable(t, client)}
		}},
		{"redis", func(t *testing.T) []string {
			client := redistest.NewClient(t)
			s := redistest.NewStore(t, client)
			return []string{"-store", "redis", "-addr", redistest.Addr(t), "-prefix", s.Prefix()}
		}},
		{"postgres", func(t *testing.T) []string {
			pool := postgrestest.NewPool(t)
			return []string{"-store", "postgres", "-url", postgrestest.URL(t), "-table", postgrestest.NewTable(t, pool, "")}
		}},
	} {
		t.Run(sp.name, func(t *testing.T) {
			flags := sp.flags(t) // skips, or fails under CI=true, without the server
			bins := drivers(t)
			start := time.Now()
			r := &rollout{t: t, bins: bins, flags: flags, dir: t.TempDir()}
			// Alternating: each run executes ten fresh keys and replays the
			// earlier ones, which the other build (and its own, two runs
			// before) executed.
			for round := range 4 {
				r.run(oneOf(round, "old", "new"), 0, (round+1)*10, 1, 4, uint64(round))
			}
			// Side by side: both builds' processes on the same fresh keys,
			// started together, each function taking 20 ms, so that calls
			// meet the other build's claims in progress.
			r.extra = []string{"-hold", "20ms", "-start", fmt.Sprint(time.Now().Add(2 * time.Second).UnixMilli())}
			var wg sync.WaitGroup
			for i, b := range []string{"old", "new", "old", "new"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r.run(b, 40, 100, 2, 4, uint64(10+i))
				}()
			}
			wg.Wait()
			waits := r.waits()
			r.extra = nil
			// Every key, by each build.
			r.run("old", 0, 100, 1, 4, 20)
			r.run("new", 0, 100, 1, 4, 21)
			r.check(100, sp.name != "redis")
			if waits == 0 {
				t.Error("no call of the processes side by side met a claim in progress")
			}
			t.Logf("side by side, calls met a claim in progress %d times", waits)
			t.Logf("%s: %d calls in %d runs, %v", sp.name, r.calls(), len(r.runs), time.Since(start).Round(time.Millisecond))
		})
	}
}

func oneOf(i int, even, odd string) string {
	if i%2 == 0 {
		return even
	}
	return odd
}

// rollout is one store's rolling deploy: the runs of the driver so far.
type rollout struct {
	t     *testing.T
	bins  map[string]string // build → driver binary
	flags []string
	extra []string // more flags for the runs
	dir   string

	mu   sync.Mutex
	runs []driverRun // protected by mu
}

type driverRun struct {
	build   string
	effects string
	lines   []driverLine
}

// driverLine is one call the driver reports (see driver/main.go).
type driverLine struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Outcome string `json:"outcome"`
	By      string `json:"by"`
	Err     string `json:"err"`
	Waits   int    `json:"waits"`
}

// run runs build's driver on ids [from, to).
func (r *rollout) run(build string, from, to, passes, workers int, seed uint64) {
	r.mu.Lock()
	effects := filepath.Join(r.dir, fmt.Sprintf("%d-%s.effects", len(r.runs), build))
	r.runs = append(r.runs, driverRun{build: build, effects: effects}) // reserves the name
	idx := len(r.runs) - 1
	r.mu.Unlock()
	args := append(append(append([]string(nil), r.flags...), r.extra...), "-build", build, "-effects", effects,
		"-from", fmt.Sprint(from), "-to", fmt.Sprint(to), "-passes", fmt.Sprint(passes),
		"-workers", fmt.Sprint(workers), "-seed", fmt.Sprint(seed))
	cmd := exec.Command(r.bins[build], args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		r.t.Errorf("the %s driver %v: %v\n%s", build, args, err, stderr.Bytes())
		return
	}
	var lines []driverLine
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var l driverLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			r.t.Errorf("the %s driver wrote %q: %v", build, sc.Text(), err)
			continue
		}
		lines = append(lines, l)
	}
	if want := (to - from) * passes; len(lines) != want {
		r.t.Errorf("the %s driver reported %d calls, want %d; stderr:\n%s", build, len(lines), want, stderr.Bytes())
	}
	r.mu.Lock()
	r.runs[idx].lines = lines
	r.mu.Unlock()
}

// waits counts the times calls so far met a claim in progress.
func (r *rollout) waits() int {
	n := 0
	for _, run := range r.runs {
		for _, l := range run.lines {
			n += l.Waits
		}
	}
	return n
}

func (r *rollout) calls() int {
	n := 0
	for _, run := range r.runs {
		n += len(run.lines)
	}
	return n
}

// check holds the runs to the rolling deploy's promises for ids [0, n):
// no call failed; every side effect happened once, by the build whose
// result every call of its key returned; and each build replayed the
// other's records of every kind (tx only on a store with transactions).
func (r *rollout) check(n int, tx bool) {
	t := r.t
	t.Helper()
	by := map[string]string{} // id → the build every call of it returned
	replays := map[string]int{}
	var failed []string
	for _, run := range r.runs {
		for _, l := range run.lines {
			if l.Err != "" {
				failed = append(failed, fmt.Sprintf("%s %s (%s): %s", run.build, l.ID, l.Kind, l.Err))
				continue
			}
			if prev, ok := by[l.ID]; ok && prev != l.By {
				t.Errorf("%s: calls returned the runs of both %s and %s", l.ID, prev, l.By)
			}
			by[l.ID] = l.By
			if l.Outcome == "replayed" && l.By != run.build {
				replays[l.Kind+": "+run.build+" replayed "+l.By+"'s"]++
			}
		}
	}
	sort.Strings(failed)
	if len(failed) > 0 {
		t.Errorf("%d calls failed, such as:\n%s", len(failed), strings.Join(failed[:min(len(failed), 10)], "\n"))
	}

	// The effects, counted outside both builds.
	count := map[string]int{}
	ranBy := map[string]string{}
	for _, run := range r.runs {
		b, err := os.ReadFile(run.effects)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, ln := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if ln == "" {
				continue
			}
			parts := strings.Fields(ln)
			if len(parts) != 3 || parts[2] != run.build {
				t.Errorf("effect line %q of a %s driver", ln, run.build)
				continue
			}
			count[parts[0]+" "+parts[1]]++
			ranBy[parts[1]] = parts[2]
		}
	}
	kinds := []string{"value", "error", "step", "http", "grpc", "tx"}
	dups, missing := 0, 0
	for i := range n {
		id := fmt.Sprintf("k-%d", i)
		kind := kinds[i%len(kinds)]
		if kind == "tx" && !tx {
			kind = "value"
		}
		want := []string{kind}
		if kind == "step" {
			want = append(want, "reserve")
		}
		for _, e := range want {
			switch c := count[e+" "+id]; {
			case c > 1:
				dups++
				t.Errorf("%s of %s happened %d times", e, id, c)
			case c == 0:
				missing++
				t.Errorf("%s of %s never happened", e, id)
			}
			delete(count, e+" "+id)
		}
		if ranBy[id] != by[id] {
			t.Errorf("%s ran in the %s build, but its calls returned the %s build's run", id, ranBy[id], by[id])
		}
	}
	for e := range count {
		t.Errorf("an unexpected side effect: %s", e)
	}
	for _, k := range kinds {
		if k == "tx" && !tx {
			continue
		}
		for _, dir := range []string{"new replayed old's", "old replayed new's"} {
			if replays[k+": "+dir] == 0 {
				t.Errorf("%s: no replay where the %s", k, dir)
			}
		}
	}
	keys := make([]string, 0, len(replays))
	for k := range replays {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n\t%s: %d", k, replays[k])
	}
	t.Logf("%d duplicate and %d missing side effects; replays across builds:%s", dups, missing, b.String())
}

// buildDrivers builds the driver from the previous release's tree and
// from this one, and returns the binaries by build: "old" and "new".
func buildDrivers(t *testing.T, dir string) map[string]string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		fail(t, "the go command is not on PATH: %v", err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		fail(t, "git is not on PATH: %v", err)
	}
	ref := readPreviousRelease(t)
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		fail(t, "not in a git clone (%v): the rolling-deploy test builds the previous release from git", err)
	}
	root := strings.TrimSpace(string(top))
	ref = previousCommit(t, root, ref)
	old := filepath.Join(dir, "old")
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The root module's tree only: the nested modules (and anything
	// large they hold) are not needed.
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", ref, "--", ".",
		":(exclude)cmd", ":(exclude)examples", ":(exclude)bench", ":(exclude)chaos",
		":(exclude)dashboards", ":(exclude)watermillguard", ":(exclude)docs")
	untar := exec.Command("tar", "-x", "-C", old)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var aerr, uerr bytes.Buffer
	archive.Stderr, untar.Stderr = &aerr, &uerr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", ref, err, aerr.Bytes())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("extracting %s: %v\n%s", ref, err, uerr.Bytes())
	}
	// A release from before the driver gets the driver as it was written
	// for that release's API (testdata/driver-pre-format.go.txt, the same
	// flags, effects and report); a later one builds its own.
	const driverDir = "internal/compattest/driver"
	if _, err := os.Stat(filepath.Join(old, driverDir, "main.go")); os.IsNotExist(err) {
		src, err := os.ReadFile(filepath.Join(root, "internal/compattest/testdata/driver-pre-format.go.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(old, driverDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(old, driverDir, "main.go"), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bins := map[string]string{"old": filepath.Join(dir, "driver-old"), "new": filepath.Join(dir, "driver-new")}
	for build, tree := range map[string]string{"old": old, "new": root} {
		// -trimpath keeps the build cache of the extracted tree across runs:
		// without it the cache is keyed by the temporary directory.
		cmd := exec.Command("go", "build", "-trimpath", "-o", bins[build], "./"+driverDir)
		cmd.Dir = tree
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building the driver from the %s tree (%s): %v\n%s", build, tree, err, out)
		}
	}
	t.Logf("built the driver of %s and of this tree in %v", ref, time.Since(start).Round(time.Millisecond))
	return bins
}

// previousCommit returns the commit ref names in the clone root. A clone
// without it (a shallow one, as CI makes) fetches that one commit from its
// remotes, by tag or by hash.
func previousCommit(t *testing.T, root, ref string) string {
	t.Helper()
	commit := func(rev string) (string, bool) {
		out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output()
		return strings.TrimSpace(string(out)), err == nil
	}
	if c, ok := commit(ref); ok {
		return c
	}
	remotes, _ := exec.Command("git", "-C", root, "remote").Output()
	var tried []string
	for _, remote := range strings.Fields(string(remotes)) {
		out, err := exec.Command("git", "-C", root, "fetch", "--quiet", "--no-tags", "--depth=1", remote, ref).CombinedOutput()
		if err == nil {
			if c, ok := commit("FETCH_HEAD"); ok {
				t.Logf("fetched %s, the previous release, from %s: %s", ref, remote, c)
				return c
			}
		}
		tried = append(tried, fmt.Sprintf("git fetch --depth=1 %s %s: %v %s", remote, ref, err, bytes.TrimSpace(out)))
	}
	shallow, _ := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
	fail(t, "the clone lacks %s, the previous release (%s), and could not fetch it (shallow clone: %s; %s). Fetch it (git fetch --unshallow, or actions/checkout with fetch-depth: 0)",
		ref, previousRelease, strings.TrimSpace(string(shallow)), strings.Join(tried, "; "))
	return ""
}

// readPreviousRelease returns the commit or tag previousRelease names:
// its first line that is neither empty nor a # comment.
func readPreviousRelease(t *testing.T) string {
	b, err := os.ReadFile(previousRelease)
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if ln = strings.TrimSpace(ln); ln != "" && !strings.HasPrefix(ln, "#") {
			return ln
		}
	}
	t.Fatalf("%s names no commit", previousRelease)
	return ""
}

// fail skips the test, or fails it under CI=true, where nothing may be
// skipped for want of a tool.
func fail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}
