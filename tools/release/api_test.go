package main

import (
	"bytes"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// apiRepo is workspaceRepo at v with a library package in the root module,
// an internal package and a command, whose exported names are not API.
func apiRepo(t *testing.T, v string) string {
	t.Helper()
	repo := workspaceRepo(t, v)
	writeFiles(t, repo, map[string]string{
		"lib/lib.go": `// Package lib is a library package.
package lib

import "context"

// Kept stays.
func Kept(ctx context.Context, n int) error { return nil }

// Removed goes in the next release.
func Removed() {}

// T is a type.
type T[V any] struct {
	F V
	g int
}

// M is a method.
func (T[V]) M(func(v V) error) {}

// P has a pointer receiver.
func (*T[V]) P() {}
`,
		"internal/x/x.go":             "package x\n\n// Hidden is not API.\nfunc Hidden() {}\n",
		"cmd/idemguard/main.go":       "package main\n\n// Exported is not API: a command.\nfunc Exported() {}\n\nfunc main() {}\n",
		"watermillguard/watermill.go": "package watermillguard\n\n// Middleware is the nested module's API.\nconst Middleware = 1\n",
	})
	return repo
}

func readFile(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// make api writes the exported API; make api-check passes on it, fails on
// an exported function added without an api/ entry, saying how to record
// it, and passes again after make api.
func TestAPICheck(t *testing.T) {
	repo := apiRepo(t, "v0.1.0")
	t.Chdir(repo)
	if err := run([]string{"api", "check"}); err == nil || !strings.Contains(err.Error(), "+pkg "+rootPath+"/lib, func Kept(context.Context, int) error") {
		t.Fatalf("api check before make api: %v, want lib.Kept named as unrecorded", err)
	}
	if err := run([]string{"api"}); err != nil {
		t.Fatal(err)
	}
	want := "pkg " + rootPath + "/lib, func Kept(context.Context, int) error\n" +
		"pkg " + rootPath + "/lib, func Removed()\n" +
		"pkg " + rootPath + "/lib, method (*T[V]) P()\n" +
		"pkg " + rootPath + "/lib, method (T[V]) M(func(V) error)\n" +
		"pkg " + rootPath + "/lib, type T[V any] struct\n" +
		"pkg " + rootPath + "/lib, type T[V any] struct, F V\n" +
		"pkg " + rootPath + "/watermillguard, const Middleware = 1\n" +
		"pkg " + rootPath + "/watermillguard, const Middleware untyped int\n"
	if got := readFile(t, filepath.Join(repo, "api/current.txt")); got != want {
		t.Fatalf("api/current.txt:\n%s\nwant:\n%s", got, want)
	}
	if err := run([]string{"api", "check"}); err != nil {
		t.Fatalf("api check after make api: %v", err)
	}

	// An exported function, unrecorded.
	writeFiles(t, repo, map[string]string{"lib/added.go": "package lib\n\n// Added is new.\nfunc Added(s string) (int, error) { return 0, nil }\n"})
	err := run([]string{"api", "check"})
	if err == nil {
		t.Fatal("api check passed with an unrecorded exported function")
	}
	for _, w := range []string{"+pkg " + rootPath + "/lib, func Added(string) (int, error)", "run `make api`"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("api check: %v\nwant it to contain %q", err, w)
		}
	}
	if err := run([]string{"api"}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"api", "check"}); err != nil {
		t.Fatalf("api check after make api: %v", err)
	}

	// A removal, and a changed signature, are differences too.
	writeFiles(t, repo, map[string]string{"lib/added.go": "package lib\n\n// Added is new.\nfunc Added(s []byte) (int, error) { return 0, nil }\n"})
	if err := os.WriteFile(filepath.Join(repo, "watermillguard/watermill.go"), []byte("package watermillguard\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = run([]string{"api", "check"})
	if err == nil {
		t.Fatal("api check passed with a removed constant and a changed function")
	}
	for _, w := range []string{
		"-pkg " + rootPath + "/lib, func Added(string) (int, error)",
		"+pkg " + rootPath + "/lib, func Added([]byte) (int, error)",
		"-pkg " + rootPath + "/watermillguard, const Middleware = 1",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("api check: %v\nwant it to contain %q", err, w)
		}
	}
}

// make release compares the API with the previous release's, as the
// module proxy serves it, and heads the release's CHANGELOG section with
// its incompatible changes: here a removed function and a changed method.
// It refuses to run while the API differs from api/current.txt.
func TestPrepareListsIncompatibleChanges(t *testing.T) {
	repo := apiRepo(t, "v0.1.0")
	t.Chdir(repo)
	// The previous release comes from a module proxy of its own, in a
	// module cache of the test's (the checksum database does not know it).
	proxy, modcache := t.TempDir(), t.TempDir()
	t.Setenv("GOPROXY", "file://"+filepath.ToSlash(proxy))
	t.Setenv("GOMODCACHE", modcache)
	t.Setenv("GOFLAGS", "-modcacherw")
	t.Setenv("GONOSUMDB", rootPath)

	// The first release: nothing to compare with; api/v0.1.0.txt keeps
	// its API.
	if err := run([]string{"api"}); err != nil {
		t.Fatal(err)
	}
	wf, mods, err := workspace(repo)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := prepare(repo, wf, mods, "v0.1.0", "2026-11-27", &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no API comparison") || strings.Contains(readFile(t, filepath.Join(repo, "CHANGELOG.md")), "Incompatible") {
		t.Errorf("the first release compared its API with something:\n%s", out.String())
	}
	if got, want := readFile(t, filepath.Join(repo, "api/v0.1.0.txt")), readFile(t, filepath.Join(repo, "api/current.txt")); got != want {
		t.Errorf("api/v0.1.0.txt:\n%s\nwant api/current.txt:\n%s", got, want)
	}
	// Published.
	if err := writeProxy(repo, mods, "v0.1.0", proxy, &out); err != nil {
		t.Fatal(err)
	}

	// The next release removes Removed, changes M and adds Added.
	writeFiles(t, repo, map[string]string{
		"lib/lib.go": strings.NewReplacer("// Removed goes in the next release.\nfunc Removed() {}\n", "",
			"M(func(v V) error)", "M(func(v V) error, int)").Replace(readFile(t, filepath.Join(repo, "lib/lib.go"))),
		"lib/added.go": "package lib\n\n// Added is new.\nfunc Added() {}\n",
		"CHANGELOG.md": strings.Replace(readFile(t, filepath.Join(repo, "CHANGELOG.md")), "## Unreleased\n", "## Unreleased\n\n- lib.Removed is gone; T.M takes a count.\n", 1),
	})
	wf, mods, err = workspace(repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := prepare(repo, wf, mods, "v0.2.0", "2026-12-01", &out); err == nil || !strings.Contains(err.Error(), "make api") {
		t.Fatalf("prepare with the API unrecorded: %v, want make api asked for", err)
	}
	if err := run([]string{"api"}); err != nil {
		t.Fatal(err)
	}
	// A patch release breaks nothing.
	if err := prepare(repo, wf, mods, "v0.1.1", "2026-12-01", &out); err == nil || !strings.Contains(err.Error(), "patch release") || !strings.Contains(err.Error(), "lib.Removed: removed") {
		t.Fatalf("prepare of a patch release with an incompatible change: %v", err)
	}
	out.Reset()
	if err := prepare(repo, wf, mods, "v0.2.0", "2026-12-01", &out); err != nil {
		t.Fatal(err)
	}
	cl := readFile(t, filepath.Join(repo, "CHANGELOG.md"))
	wantSection := "## v0.2.0 — 2026-12-01\n\n" +
		"### Incompatible API changes since v0.1.0 (apidiff)\n\n" +
		"- `" + rootPath + "/lib.Removed: removed`\n" +
		"- `" + rootPath + "/lib.T[V].M: changed from func(func(v V) error) to func(func(v V) error, int)`\n" +
		"\n- lib.Removed is gone; T.M takes a count.\n"
	if !strings.Contains(cl, wantSection) {
		t.Errorf("CHANGELOG.md:\n%s\nwant the section:\n%s", cl, wantSection)
	}
	if strings.Contains(cl, "lib.Added") {
		t.Errorf("a compatible addition is listed as incompatible:\n%s", cl)
	}
	if !strings.Contains(out.String(), "2 incompatible change(s) since v0.1.0") {
		t.Errorf("prepare printed:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(repo, "api/v0.2.0.txt")); err != nil {
		t.Error(err)
	}
}

// The previous release is the newest below the new one that api/ keeps,
// or that the modules require.
func TestPreviousRelease(t *testing.T) {
	repo := workspaceRepo(t, "v0.1.0")
	_, mods, err := workspace(repo)
	if err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]string{"v0.1.0": "", "v0.2.0": "v0.1.0"} {
		if got, err := previousRelease(repo, mods, v); got != want || err != nil {
			t.Errorf("without api/VERSION.txt: previousRelease(%s) = %q, %v; want %q", v, got, err, want)
		}
	}
	writeFiles(t, repo, map[string]string{"api/v0.1.0.txt": "", "api/v0.10.0.txt": "", "api/v0.2.0.txt": "", "api/v0.2.1.txt": "", "api/notes.md": ""})
	for v, want := range map[string]string{"v0.1.0": "", "v0.2.0": "v0.1.0", "v0.3.0": "v0.2.1", "v0.11.0": "v0.10.0", "v0.2.1-rc.1": "v0.2.0"} {
		if got, err := previousRelease(repo, mods, v); got != want || err != nil {
			t.Errorf("previousRelease(%s) = %q, %v; want %q", v, got, err, want)
		}
	}
}

// Each kind of feature, spelled as api/ spells it.
func TestPackageFeatures(t *testing.T) {
	const src = `package p

import (
	"context"
	"io"
)

const Typed Mode = 2
const Untyped = "s"

var Var map[string][]chan<- int

type Mode int

func (m Mode) String() string { return "" }

type Alias = io.Reader

type Generic[K comparable, V any] = map[K]V

type Number interface{ ~int | ~float64 }

type Closed interface {
	io.Closer
	Name(ctx context.Context) string
	hidden()
}

type inner struct{ Promoted int }

func (*inner) Inner() {}

type Outer struct {
	inner
	io.Reader
	Exported [4]byte
	Fn       func(n int, rest ...string) (ok bool, err error)
	unexported int
}

func Sum[N Number](ns ...N) N { var z N; return z }

func Recv(<-chan struct{ A int }) interface{ M() } { return nil }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := (&types.Config{Importer: importer.Default()}).Check("example.com/p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"const Typed Mode",
		"const Typed = 2",
		"const Untyped untyped string",
		`const Untyped = "s"`,
		"var Var map[string][]chan<- int",
		"type Mode int",
		"method (Mode) String() string",
		"type Alias = io.Reader",
		"type Generic[K comparable, V any] = map[K]V",
		"type Number interface, type set interface{ ~int | ~float64 }",
		"type Number interface {}",
		"type Closed interface, Close() error",
		"type Closed interface, Name(context.Context) string",
		"type Closed interface, unexported methods",
		"type Closed interface { Close, Name }",
		"type Outer struct",
		"type Outer struct, embedded inner",
		"type Outer struct, Promoted int",
		"type Outer struct, embedded io.Reader",
		"type Outer struct, Exported [4]byte",
		"type Outer struct, Fn func(int, ...string) (bool, error)",
		"method (Outer) Read([]byte) (int, error)",
		"method (*Outer) Inner()",
		"func Sum[N Number](...N) N",
		"func Recv(<-chan struct{A int}) interface{ M() }",
	}
	got := packageFeatures(pkg)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("features:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
