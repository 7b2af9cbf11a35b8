package main

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// gitRepo makes a git repository in a temporary directory holding files
// (path → content), and commits them.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	runGit(t, dir, "init", "-q")
	runGit(t, dir, "add", "-A")
	runGit(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "files")
	return dir
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		file := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func runGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// zipContents returns a module zip's files, name → content.
func zipContents(t *testing.T, data []byte) map[string]string {
	t.Helper()
	r, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range r.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name] = string(b)
	}
	return files
}

func keys(m map[string]string) []string {
	var k []string
	for name := range m {
		k = append(k, name)
	}
	slices.Sort(k)
	return k
}

var repoFiles = map[string]string{
	"go.mod":                    "module example.com/m\n\ngo 1.26.0\n",
	"LICENSE":                   "the licence\n",
	".gitignore":                "/bin/\n*.out\n",
	"m.go":                      "package m\n",
	"internal/x/x.go":           "package x\n",
	"testdata/golden.txt":       "golden\n",
	"vendor/example.org/v/v.go": "package v\n",
	"sub/go.mod":                "module example.com/m/sub\n\ngo 1.26.0\n\nrequire example.com/m v0.1.0\n",
	"sub/sub.go":                "package sub\n",
	"sub/deeper/d.go":           "package deeper\n",
	"other/go.mod":              "module example.com/m/other\n\ngo 1.26.0\n",
	"other/LICENSE":             "other's own licence\n",
	"other/o.go":                "package other\n",
}

// A module's zip from the working tree holds exactly what the go command
// makes of a tag of the same tree (zip.CreateFromVCS does as it does): no
// nested module's files, no vendored packages, no ignored files, and a
// nested module without a LICENSE gets the repository's.
func TestModuleFilesMatchATag(t *testing.T) {
	repo := gitRepo(t, repoFiles)
	// Ignored files in the working tree, which a tag never holds.
	writeFiles(t, repo, map[string]string{"bin/tool": "binary", "cover.out": "profile", "sub/cover.out": "profile"})
	for _, m := range []struct{ dir, path string }{{".", "example.com/m"}, {"sub", "example.com/m/sub"}, {"other", "example.com/m/other"}} {
		t.Run(m.dir, func(t *testing.T) {
			mv := module.Version{Path: m.path, Version: "v0.1.0"}
			files, err := moduleFiles(repo, m.dir)
			if err != nil {
				t.Fatal(err)
			}
			var ours, tag bytes.Buffer
			if err := modzip.Create(&ours, mv, files); err != nil {
				t.Fatal(err)
			}
			subdir := m.dir
			if subdir == "." {
				subdir = ""
			}
			if err := modzip.CreateFromVCS(&tag, mv, repo, "HEAD", subdir); err != nil {
				t.Fatal(err)
			}
			got, want := zipContents(t, ours.Bytes()), zipContents(t, tag.Bytes())
			if !slices.Equal(keys(got), keys(want)) {
				t.Fatalf("files from the working tree:\n%s\nfrom a tag:\n%s", strings.Join(keys(got), "\n"), strings.Join(keys(want), "\n"))
			}
			for name, content := range want {
				if got[name] != content {
					t.Errorf("%s: %q from the working tree, %q from a tag", name, got[name], content)
				}
			}
		})
	}
	// And what that is, spelled out for the root and a nested module.
	files, err := moduleFiles(repo, ".")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := modzip.Create(&buf, module.Version{Path: "example.com/m", Version: "v0.1.0"}, files); err != nil {
		t.Fatal(err)
	}
	want := []string{".gitignore", "LICENSE", "go.mod", "internal/x/x.go", "m.go", "testdata/golden.txt"}
	for i, w := range want {
		want[i] = "example.com/m@v0.1.0/" + w
	}
	if got := keys(zipContents(t, buf.Bytes())); !slices.Equal(got, want) {
		t.Errorf("root module zip holds %v, want %v", got, want)
	}
	files, err = moduleFiles(repo, "sub")
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := modzip.Create(&buf, module.Version{Path: "example.com/m/sub", Version: "v0.1.0"}, files); err != nil {
		t.Fatal(err)
	}
	if got := zipContents(t, buf.Bytes())["example.com/m/sub@v0.1.0/LICENSE"]; got != "the licence\n" {
		t.Errorf("nested module's LICENSE is %q, want the repository's", got)
	}
}

// The zip is made from the working tree: an edit not yet committed, and a
// new file not yet added, are in it; a deleted file is not.
func TestModuleFilesReadTheWorkingTree(t *testing.T) {
	repo := gitRepo(t, repoFiles)
	writeFiles(t, repo, map[string]string{"m.go": "package m // edited\n", "new.go": "package m\n"})
	if err := os.Remove(filepath.Join(repo, "internal/x/x.go")); err != nil {
		t.Fatal(err)
	}
	files, err := moduleFiles(repo, ".")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := modzip.Create(&buf, module.Version{Path: "example.com/m", Version: "v0.1.0"}, files); err != nil {
		t.Fatal(err)
	}
	got := zipContents(t, buf.Bytes())
	if got["example.com/m@v0.1.0/m.go"] != "package m // edited\n" {
		t.Errorf("m.go is %q, want the edit", got["example.com/m@v0.1.0/m.go"])
	}
	if _, ok := got["example.com/m@v0.1.0/new.go"]; !ok {
		t.Error("the new file is missing")
	}
	if _, ok := got["example.com/m@v0.1.0/internal/x/x.go"]; ok {
		t.Error("the deleted file is there")
	}
}

// workspaceRepo is a repository laid out as idemguard's: go.work using
// the released and unpublished modules, which require root at version v.
func workspaceRepo(t *testing.T, v string) string {
	t.Helper()
	files := map[string]string{
		"LICENSE":      "the licence\n",
		"CHANGELOG.md": "# Changelog\n\nIntro.\n\n## Unreleased\n\n### Added\n\n- a thing\n\n## v0.0.9 — 2026-01-01\n\n- old\n",
		"go.work":      "go 1.26.0\n\nuse (\n",
		// No package has exported features yet.
		"api/current.txt": "",
	}
	req := func(dir string) string {
		s := "module " + rootPath
		if dir != "." {
			s += "/" + dir
		}
		s += "\n\ngo 1.26.0\n"
		if dir != "." {
			s += "\nrequire " + rootPath + " " + v + "\n"
		}
		if dir == "examples" {
			s += "\nrequire " + rootPath + "/watermillguard " + v + "\n"
		}
		return s
	}
	for _, dir := range append(slices.Clone(released), unpublished...) {
		files[filepath.ToSlash(filepath.Join(dir, "go.mod"))] = req(dir)
		files["go.work"] += "\t./" + strings.TrimPrefix(dir, ".") + "\n"
	}
	files["go.work"] += ")\n"
	for _, dir := range released {
		files["go.work"] += "\nreplace " + rootPath + strings.TrimSuffix("/"+dir, "/.") + " " + v + " => ./" + strings.TrimPrefix(dir, ".") + "\n"
	}
	return gitRepo(t, files)
}

func TestCheckRequires(t *testing.T) {
	repo := workspaceRepo(t, "v0.1.0")
	wf, mods, err := workspace(repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRequires(repo, wf, mods, "v0.1.0"); err != nil {
		t.Fatalf("a consistent workspace: %v", err)
	}
	if v, err := requiredVersion(repo, mods); v != "v0.1.0" || err != nil {
		t.Fatalf("requiredVersion = %q, %v; want v0.1.0", v, err)
	}
	// One nested module still on v0.0.0, which resolves only inside the
	// workspace.
	writeFiles(t, repo, map[string]string{"watermillguard/go.mod": "module " + rootPath + "/watermillguard\n\ngo 1.26.0\n\nrequire " + rootPath + " v0.0.0\n"})
	wf, mods, err = workspace(repo)
	if err != nil {
		t.Fatal(err)
	}
	err = checkRequires(repo, wf, mods, "v0.1.0")
	if err == nil || !strings.Contains(err.Error(), "watermillguard/go.mod requires "+rootPath+" v0.0.0") {
		t.Errorf("checkRequires = %v, want watermillguard's v0.0.0 named", err)
	}
	if _, err := requiredVersion(repo, mods); err == nil || !strings.Contains(err.Error(), "different versions") {
		t.Errorf("requiredVersion = %v, want the disagreement", err)
	}
	// A released module with a replace directive.
	writeFiles(t, repo, map[string]string{"cmd/idemguard/go.mod": "module " + rootPath + "/cmd/idemguard\n\ngo 1.26.0\n\nrequire " + rootPath + " v0.1.0\n\nreplace " + rootPath + " => ../../\n"})
	wf, mods, err = workspace(repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRequires(repo, wf, mods, "v0.1.0"); err == nil || !strings.Contains(err.Error(), "cmd/idemguard/go.mod replaces") {
		t.Errorf("checkRequires = %v, want cmd/idemguard's replace named", err)
	}
	// A module go.work uses that nobody decided about.
	writeFiles(t, repo, map[string]string{"newmod/go.mod": "module " + rootPath + "/newmod\n\ngo 1.26.0\n", "go.work": "go 1.26.0\n\nuse (\n\t.\n\t./newmod\n)\n"})
	if _, _, err := workspace(repo); err == nil || !strings.Contains(err.Error(), "newmod, which is neither released nor unpublished") {
		t.Errorf("workspace = %v, want newmod named", err)
	}
}

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"v0.1.0": true, "v0.2.3": true, "v1.0.0": true, "v0.2.0-rc.1": true,
		"v0.0.0": false, "v0.0.1": false, "v0.1.0-rc.1": true, "v2.0.0": false, "0.1.0": false, "v0.1": false, "v0.1.0+meta": false,
	} {
		if err := checkVersion(v); (err == nil) != ok {
			t.Errorf("checkVersion(%q) = %v", v, err)
		}
	}
}

// make release VERSION=v0.2.0: every requirement and go.work's replace
// directives move to v0.2.0, the CHANGELOG's Unreleased entries move under
// v0.2.0, and the result passes the check.
func TestPrepare(t *testing.T) {
	repo := workspaceRepo(t, "v0.1.0")
	wf, mods, err := workspace(repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := prepare(repo, wf, mods, "v0.2.0", "2026-11-27", io.Discard); err != nil {
		t.Fatal(err)
	}
	wf, mods, err = workspace(repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRequires(repo, wf, mods, "v0.2.0"); err != nil {
		t.Errorf("after prepare: %v", err)
	}
	if err := checkRequires(repo, wf, mods, "v0.1.0"); err == nil {
		t.Error("after prepare the modules still require v0.1.0")
	}
	cl, err := os.ReadFile(filepath.Join(repo, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := "# Changelog\n\nIntro.\n\n## Unreleased\n\n## v0.2.0 — 2026-11-27\n\n### Added\n\n- a thing\n\n## v0.0.9 — 2026-01-01\n\n- old\n"
	if string(cl) != want {
		t.Errorf("CHANGELOG.md:\n%s\nwant:\n%s", cl, want)
	}
	// Releasing again with nothing new is refused.
	if err := prepare(repo, wf, mods, "v0.2.1", "2026-11-28", io.Discard); err == nil || !strings.Contains(err.Error(), "nothing under") {
		t.Errorf("a second prepare with an empty Unreleased section: %v", err)
	}
	if _, err := cutChangelog(cl, "v0.2.0", "2026-11-28", ""); err == nil {
		t.Error("a second section for v0.2.0 was allowed")
	}
}

// The proxy holds each released module at the version, in the layout
// GOPROXY=file:// reads, with the zip the working tree makes.
func TestWriteProxy(t *testing.T) {
	repo := workspaceRepo(t, "v0.1.0")
	wf, mods, err := workspace(repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRequires(repo, wf, mods, "v0.1.0"); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := writeProxy(repo, mods, "v0.1.0", out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		dir := filepath.Join(out, filepath.FromSlash(m.Path), "@v")
		_, err := os.Stat(filepath.Join(dir, "v0.1.0.zip"))
		if m.Released != (err == nil) {
			t.Errorf("%s (released %v): zip: %v", m.Path, m.Released, err)
		}
		if !m.Released {
			continue
		}
		if _, err := modzip.CheckZip(module.Version{Path: m.Path, Version: "v0.1.0"}, filepath.Join(dir, "v0.1.0.zip")); err != nil {
			t.Errorf("%s: %v", m.Path, err)
		}
		list, _ := os.ReadFile(filepath.Join(dir, "list"))
		info, _ := os.ReadFile(filepath.Join(dir, "v0.1.0.info"))
		gomod, _ := os.ReadFile(filepath.Join(dir, "v0.1.0.mod"))
		orig, _ := os.ReadFile(m.GoMod)
		if string(list) != "v0.1.0\n" || !strings.Contains(string(info), `"Version":"v0.1.0"`) || !bytes.Equal(gomod, orig) {
			t.Errorf("%s: list %q, info %q, go.mod %q", m.Path, list, info, gomod)
		}
	}
	sums, err := os.ReadFile(filepath.Join(out, "sums.txt"))
	if err != nil || strings.Count(string(sums), " v0.1.0 h1:") != len(released) {
		t.Errorf("sums.txt: %q, %v", sums, err)
	}
}
