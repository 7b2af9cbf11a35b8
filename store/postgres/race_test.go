package postgres_test

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/testing/postgrestest"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
	"github.com/idemguard/idemguard/store/storetest"
)

// naiveEnv, when set, makes TestNaiveConformanceHelper run the suite's
// claim races against postgres.NaiveStore.
const naiveEnv = "IDEMGUARD_TEST_NAIVE_ACQUIRE"

// TestNaiveConformanceHelper is not a test of its own: it is the process
// TestSuiteCatchesSnapshotTrap starts. Without naiveEnv it does nothing.
func TestNaiveConformanceHelper(t *testing.T) {
	if os.Getenv(naiveEnv) == "" {
		return
	}
	pool := postgrestest.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	storetest.Run(t, func(t *testing.T) store.Store {
		return postgres.NaiveStore{Store: postgrestest.NewStore(t, pool)}
	})
}

// TestSuiteCatchesSnapshotTrap shows that the conformance suite's claim
// races would fail a store whose Acquire reads the row it lost to in the
// same statement as its upsert and trusts it (postgres.NaiveStore), the
// trap that the store's Acquire avoids by sending its pipeline when that
// read finds no live row: the suite, run against it in a child process,
// fails, and fails in the claim races with losers that saw no record or
// the expired one.
func TestSuiteCatchesSnapshotTrap(t *testing.T) {
	postgrestest.URL(t) // the child needs the server too
	cmd := exec.Command(os.Args[0], "-test.run=^TestNaiveConformanceHelper$/ClaimRace", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), naiveEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite's claim races passed a store with the snapshot trap; they prove nothing:\n%s", out)
	}
	lost := regexp.MustCompile(`claim \d+ lost (with no record|to token "[^"]*", want the winner's)`)
	n := len(lost.FindAll(out, -1))
	if n == 0 {
		t.Fatalf("the child failed, but not with a loser that missed the winner's record:\n%s", out)
	}
	t.Logf("the naive Acquire failed the claim races with %d losers that missed the winner's record; first lines:\n%s",
		n, firstLines(out, lost, 4))
}

func firstLines(out []byte, re *regexp.Regexp, n int) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(out, []byte("\n")) {
		if n > 0 && re.Match(line) {
			b.Write(bytes.TrimSpace(line))
			b.WriteByte('\n')
			n--
		}
	}
	return b.Bytes()
}
