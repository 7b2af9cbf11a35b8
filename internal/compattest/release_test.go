package compattest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// candidateGoMod is the go.mod of a released nested module: the version
// of the library it requires is the release candidate (make release
// VERSION=… sets it in every module; tools/release check holds them equal).
const candidateGoMod = "../../cmd/idemguard/go.mod"

// goldenStores are the stores whose encodings a golden set holds.
var goldenStores = []string{"dynamodb", "redis", "postgres"}

// TestReleaseSets holds a release to the records' tests: the release
// candidate has a golden set in every store's encoding, and the rolling
// deploy starts from the release before it. So `make release
// VERSION=v0.x.0` leaves make test failing until both are done
// (docs/releasing.md).
func TestReleaseSets(t *testing.T) {
	candidate := candidateVersion(t)
	// A release is tagged before this commit: git has its tag, on
	// another commit than this one (on its own commit the rolling deploy
	// still starts from the release before).
	tagged := func(v string) bool {
		rev := func(r string) string {
			out, err := exec.Command("git", "rev-parse", "--verify", "--quiet", r+"^{commit}").Output()
			if err != nil {
				return ""
			}
			return strings.TrimSpace(string(out))
		}
		c := rev("refs/tags/" + v)
		return c != "" && c != rev("HEAD")
	}
	for _, p := range releaseSetProblems(candidate, goldenVersions(t), readPreviousRelease(t), tagged, func(v, s string) bool {
		_, err := os.Stat(setPath(v, s))
		return err == nil
	}) {
		t.Error(p)
	}
}

// releaseSetProblems returns what keeps the golden sets and the previous
// release from being those of the candidate: versions are the golden
// sets' releases, previous what testdata/previous-release names, tagged
// whether a release was tagged before this commit, has whether a set
// holds a store.
func releaseSetProblems(candidate string, versions []string, previous string, tagged func(string) bool, has func(version, store string) bool) []string {
	var problems []string
	for _, s := range goldenStores {
		if !has(candidate, s) {
			problems = append(problems, "the release candidate "+candidate+" has no golden records for "+s+" (internal/compattest/"+setPath(candidate, s)+"): "+
				`IDEMGUARD_SERVICES="dynamodb redis postgres" scripts/harness.sh run go test ./internal/compattest -run TestGoldenRecords -update `+candidate)
		}
	}
	// The release the rolling deploy starts from: the candidate once it
	// is tagged (the next one is being made), else the newest release
	// before it that kept a golden set; before the first release, a
	// commit.
	want := ""
	if tagged(candidate) {
		want = candidate
	} else {
		for _, v := range versions {
			if versionLess(v, candidate) {
				want = v
			}
		}
	}
	switch {
	case want != "" && previous != want:
		problems = append(problems, "the rolling deploy starts from "+previous+", not from the previous release, "+want+": write "+want+" in internal/compattest/"+previousRelease)
	case want == "" && versionRE.MatchString(previous):
		problems = append(problems, "the rolling deploy starts from "+previous+", which is no release before the candidate "+candidate+" (no golden set of it, no tag): name the previous release or, before the first, a commit, in internal/compattest/"+previousRelease)
	}
	return problems
}

var requireRE = regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/idemguard/idemguard\s+(v\S+)`)

// candidateVersion returns the version of the library that the nested
// modules require: the release being made, or the last one made.
func candidateVersion(t *testing.T) string {
	b, err := os.ReadFile(filepath.FromSlash(candidateGoMod))
	if err != nil {
		t.Fatal(err)
	}
	m := requireRE.FindSubmatch(b)
	if m == nil || !versionRE.Match(m[1]) {
		t.Fatalf("%s requires no release of github.com/idemguard/idemguard", candidateGoMod)
	}
	return string(m[1])
}

func TestReleaseSetProblems(t *testing.T) {
	all := func(string, string) bool { return true }
	none := func(string) bool { return false }
	for _, c := range []struct {
		name      string
		candidate string
		versions  []string
		previous  string
		tagged    func(string) bool
		has       func(string, string) bool
		want      []string // substrings, one per problem
	}{
		{"first release", "v0.1.0", []string{"v0.1.0"}, "728c2223b2263a65c2ea63eb3fbacb85210cacbd", none, all, nil},
		{"first release without its set", "v0.1.0", nil, "728c222", none, func(string, string) bool { return false },
			[]string{"no golden records for dynamodb", "no golden records for redis", "no golden records for postgres"}},
		{"set without redis", "v0.1.0", []string{"v0.1.0"}, "728c222", none, func(_, s string) bool { return s != "redis" },
			[]string{"no golden records for redis"}},
		{"next release prepared, set missing", "v0.2.0", []string{"v0.1.0"}, "v0.1.0", none, func(v, _ string) bool { return v == "v0.1.0" },
			[]string{"no golden records for dynamodb", "no golden records for redis", "no golden records for postgres"}},
		{"next release, deploy from the commit still", "v0.2.0", []string{"v0.1.0", "v0.2.0"}, "728c222", none, all,
			[]string{"not from the previous release, v0.1.0"}},
		{"next release", "v0.2.0", []string{"v0.1.0", "v0.2.0"}, "v0.1.0", none, all, nil},
		{"candidate tagged, deploy from before it", "v0.1.0", []string{"v0.1.0"}, "728c222", func(v string) bool { return v == "v0.1.0" }, all,
			[]string{"not from the previous release, v0.1.0"}},
		{"a version that is no earlier release", "v0.1.0", []string{"v0.1.0"}, "v0.0.9", none, all,
			[]string{"no release before the candidate"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := releaseSetProblems(c.candidate, c.versions, c.previous, c.tagged, c.has)
			if len(got) != len(c.want) {
				t.Fatalf("problems = %q, want %d matching %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}
