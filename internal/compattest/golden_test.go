package compattest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"
)

var update = flag.String("update", "", "write the records the current code writes as the golden set of release `version` (such as v0.2.0), for every store; a released (tagged) set is never rewritten")

// goldenDir holds a directory of golden records per release.
const goldenDir = "testdata/golden"

// goldenClock is the guard's clock while golden records are written: far
// ahead, so that no server deletes them as expired, on a whole second, so
// that every store keeps its times exactly.
var goldenClock = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)

var discardLogger = slog.New(slog.DiscardHandler)

// goldenSet is one release's golden records in one store's encoding.
type goldenSet struct {
	Store string `json:"store"`
	// Format is store.FormatVersion of the code that wrote them.
	Format int `json:"format"`
	// Clock is the guard's clock when they were written.
	Clock   time.Time      `json:"clock"`
	Records []goldenRecord `json:"records"`
}

type goldenRecord struct {
	// Scenario names the scenario that wrote it.
	Scenario string `json:"scenario"`
	Key      string `json:"key"`
	// Record is the record the current code reads from Item.
	Record storeRecord `json:"record"`
	// Item is the record in the store's encoding.
	Item json.RawMessage `json:"item"`
}

// TestGoldenRecords holds the current code to the records of every
// release: each golden set under testdata/golden is written raw into a
// fresh key space of each store and read back through the store (Get,
// GetMany) and through the guard and its adapters (replays, the live
// claim's conflict, a crashed call's step); and the records the current
// code writes must be those of the newest set, so that an encoding cannot
// change without a set of its own.
func TestGoldenRecords(t *testing.T) {
	if *update != "" {
		checkUpdatable(t, *update)
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			sp := st.new(t)
			got := writeGolden(t, sp)
			got.Store = st.name
			if *update != "" {
				saveSet(t, *update, got)
			}
			versions := goldenVersions(t)
			if len(versions) == 0 {
				t.Fatalf("no golden records under %s: write the current release's with -update vX.Y.Z", goldenDir)
			}
			for _, v := range versions {
				t.Run(v, func(t *testing.T) {
					set := loadSet(t, v, st.name)
					if set == nil {
						t.Skipf("release %s kept no golden records for %s", v, st.name)
					}
					readGolden(t, st.new(t), set)
				})
			}
			newest := versions[len(versions)-1]
			if want := loadSet(t, newest, st.name); want == nil {
				t.Errorf("the newest golden set, %s, has no records for %s", newest, st.name)
			} else if d := diffSets(sp, want, got); d != "" {
				t.Errorf("the current code does not write the records of the newest golden set, %s:\n%s\n\n"+
					"An encoding changed. A build of %[1]s must still read what this one writes, or store.FormatVersion "+
					"must rise and the CHANGELOG name the release as needing a drain (docs/compatibility.md). "+
					"Then keep %[1]s and add the next release's set: go test ./internal/compattest -run TestGoldenRecords -update vX.Y.Z",
					newest, d)
			}
		})
	}
}

// writeGolden runs every scenario the space's store can through the
// guard at goldenClock, and returns the records they wrote: each the first
// time it was seen, with the scenario that wrote it.
func writeGolden(t *testing.T, sp *space) *goldenSet {
	ctx := context.Background()
	var tokens tokenMap
	e := newEnv(t, sp, sp.wrap(sp.store, &tokens), goldenClock)
	set := &goldenSet{Format: store.FormatVersion, Clock: goldenClock}
	seen := map[string]bool{}
	var current string
	take := func() {
		for key, item := range sp.snapshot(t) {
			if seen[key] {
				continue
			}
			seen[key] = true
			rec, err := sp.store.Get(ctx, key)
			if err != nil {
				t.Fatalf("%s: reading back %q: %v", current, key, err)
			}
			set.Records = append(set.Records, goldenRecord{Scenario: current, Key: key, Record: recordJSON(rec), Item: canonical(t, item)})
		}
	}
	e.snap = take
	for _, sc := range scenarios {
		if sc.tx && sp.execTx == nil {
			continue
		}
		current = sc.name
		if err := sc.write(ctx, e); err != nil {
			t.Fatalf("scenario %s: %v", sc.name, err)
		}
		take()
	}
	sort.Slice(set.Records, func(i, j int) bool {
		a, b := set.Records[i], set.Records[j]
		return a.Scenario < b.Scenario || a.Scenario == b.Scenario && a.Key < b.Key
	})
	return set
}

// readGolden writes set's records raw into sp and reads them back.
func readGolden(t *testing.T, sp *space, set *goldenSet) {
	ctx := context.Background()
	keys := make([]string, 0, len(set.Records))
	for _, r := range set.Records {
		sp.write(t, r.Key, r.Item)
		keys = append(keys, r.Key)
	}
	for _, r := range set.Records {
		rec, err := sp.store.Get(ctx, r.Key)
		if err != nil {
			t.Errorf("%s: Get(%q) = %v", r.Scenario, r.Key, err)
			continue
		}
		if d := sameRecord(recordJSON(rec), r.Record); d != "" {
			t.Errorf("%s: Get(%q) reads the golden item as another record: %s", r.Scenario, r.Key, d)
		}
	}
	if bg, ok := sp.store.(store.BatchGetter); ok {
		recs, err := bg.GetMany(ctx, keys)
		if err != nil {
			t.Errorf("GetMany of the golden records = %v", err)
		}
		for _, r := range set.Records {
			if rec := recs[r.Key]; rec == nil {
				t.Errorf("%s: GetMany left out %q", r.Scenario, r.Key)
			} else if d := sameRecord(recordJSON(rec), r.Record); d != "" {
				t.Errorf("%s: GetMany(%q) reads the golden item as another record: %s", r.Scenario, r.Key, d)
			}
		}
	}
	e := newEnv(t, sp, sp.store, set.Clock.Add(10*time.Minute))
	e.base = set.Clock
	done := map[string]bool{}
	for _, r := range set.Records {
		if done[r.Scenario] {
			continue
		}
		done[r.Scenario] = true
		sc := scenarioNamed(r.Scenario)
		if sc == nil {
			t.Errorf("the golden records hold scenario %q, which the test no longer has: a release's records must stay readable", r.Scenario)
			continue
		}
		if err := sc.read(ctx, e); err != nil {
			t.Errorf("%s: %v", sc.name, err)
		}
	}
}

func scenarioNamed(name string) *scenario {
	for i := range scenarios {
		if scenarios[i].name == name {
			return &scenarios[i]
		}
	}
	return nil
}

// diffSets reports how the records got differ from want, items compared
// after sp's normalisation, or "".
func diffSets(sp *space, want, got *goldenSet) string {
	var d []string
	if want.Format != got.Format {
		d = append(d, fmt.Sprintf("format %d, the set's %d", got.Format, want.Format))
	}
	type id struct{ scenario, key string }
	index := func(s *goldenSet) map[id]goldenRecord {
		m := map[id]goldenRecord{}
		for _, r := range s.Records {
			m[id{r.Scenario, r.Key}] = r
		}
		return m
	}
	w, g := index(want), index(got)
	for k, wr := range w {
		gr, ok := g[k]
		if !ok {
			d = append(d, fmt.Sprintf("%s: the set has %q, which the current code no longer writes", k.scenario, k.key))
			continue
		}
		if diff := sameRecord(gr.Record, wr.Record); diff != "" {
			d = append(d, fmt.Sprintf("%s: %q reads as another record: %s", k.scenario, k.key, diff))
		}
		wi, err1 := sp.normalize(wr.Item)
		gi, err2 := sp.normalize(gr.Item)
		if err1 != nil || err2 != nil {
			d = append(d, fmt.Sprintf("%s: %q: %v %v", k.scenario, k.key, err1, err2))
			continue
		}
		if wc, gc := canonicalBytes(wi), canonicalBytes(gi); !bytes.Equal(wc, gc) {
			d = append(d, fmt.Sprintf("%s: %q is stored as\n\t%.600s\nthe set has\n\t%.600s", k.scenario, k.key, gc, wc))
		}
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			d = append(d, fmt.Sprintf("%s: the current code writes %q, which the set lacks", k.scenario, k.key))
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}

// canonical returns raw with its object keys sorted.
func canonical(t *testing.T, raw json.RawMessage) json.RawMessage {
	t.Helper()
	b := canonicalBytes(raw)
	if b == nil {
		t.Fatalf("not JSON: %.200s", raw)
	}
	return b
}

func canonicalBytes(raw []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

var versionRE = regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)$`)

// goldenVersions returns the releases that kept golden records, oldest
// first.
func goldenVersions(t *testing.T) []string {
	entries, err := os.ReadDir(goldenDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var vs []string
	for _, e := range entries {
		if e.IsDir() && versionRE.MatchString(e.Name()) {
			vs = append(vs, e.Name())
		}
	}
	sort.Slice(vs, func(i, j int) bool { return versionLess(vs[i], vs[j]) })
	return vs
}

func versionLess(a, b string) bool {
	ma, mb := versionRE.FindStringSubmatch(a), versionRE.FindStringSubmatch(b)
	for i := 1; i <= 3; i++ {
		x, _ := strconv.Atoi(ma[i])
		y, _ := strconv.Atoi(mb[i])
		if x != y {
			return x < y
		}
	}
	return false
}

// checkUpdatable fails unless version names a release whose golden set
// may be written: a version, not one that git has a tag for (a released
// set is kept as it is).
func checkUpdatable(t *testing.T, version string) {
	if !versionRE.MatchString(version) {
		t.Fatalf("-update %q: want a release version, such as v0.2.0", version)
	}
	out, err := exec.Command("git", "tag", "--list", version).Output()
	if err != nil {
		t.Fatalf("-update: cannot ask git whether %s is released: %v", version, err)
	}
	if strings.TrimSpace(string(out)) != "" {
		t.Fatalf("-update %s: %s is released (tagged); its golden records are kept as they are. Name the next release.", version, version)
	}
}

func setPath(version, storeName string) string {
	return filepath.Join(goldenDir, version, storeName+".json")
}

func loadSet(t *testing.T, version, storeName string) *goldenSet {
	b, err := os.ReadFile(setPath(version, storeName))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var set goldenSet
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatalf("%s: %v", setPath(version, storeName), err)
	}
	return &set
}

func saveSet(t *testing.T, version string, set *goldenSet) {
	b, err := json.MarshalIndent(set, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	p := setPath(version, set.Store)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d records)", p, len(set.Records))
}
