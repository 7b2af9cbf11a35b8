package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// rootPath is the library's module path; a nested module's path is rootPath
// and its directory.
const rootPath = "github.com/idemguard/idemguard"

// released lists the modules a release tags, by directory: the library,
// the CLI and the Watermill middleware. Each gets the tag DIR/VERSION
// (VERSION for the root).
var released = []string{".", "cmd/idemguard", "lambdaguard", "watermillguard"}

// unpublished lists the workspace's modules that a release does not tag:
// they are the repository's own programs and tests (the examples, the
// benchmarks, the chaos suite, the dashboard and alert generator, this
// tool, the consumer make release-check builds), not something to import.
// They require the released version like the others, and go.work gives
// them the working tree.
var unpublished = []string{"bench", "chaos", "dashboards", "examples", "tools", "tools/consumer"}

// A mod is one module of the workspace.
type mod struct {
	Dir      string // relative to the repository root, "." for the root
	Path     string // module path
	Released bool
	GoMod    string // its go.mod file
	File     *modfile.File
}

// Tag returns the tag that marks version v of m.
func (m mod) Tag(v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}

// workspace reads go.work in repo and every module it uses, and checks
// that each is either released or unpublished, so that a new module needs
// a decision.
//
// go.work replaces each released module at the version the modules
// require by its directory: the go command reads the go.mod of a
// required version even of a workspace module, and the version is not on
// the module proxy before its tag is pushed.
func workspace(repo string) (*modfile.WorkFile, []mod, error) {
	data, err := os.ReadFile(filepath.Join(repo, "go.work"))
	if err != nil {
		return nil, nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, nil, err
	}
	var mods []mod
	var errs []error
	for _, u := range wf.Use {
		dir := path.Clean(strings.TrimPrefix(u.Path, "./"))
		m := mod{Dir: dir, Released: slices.Contains(released, dir)}
		if !m.Released && !slices.Contains(unpublished, dir) {
			errs = append(errs, fmt.Errorf("go.work uses %s, which is neither released nor unpublished: add it to one of the lists in tools/release/modules.go", dir))
			continue
		}
		m.GoMod = filepath.Join(repo, filepath.FromSlash(dir), "go.mod")
		data, err := os.ReadFile(m.GoMod)
		if err != nil {
			return nil, nil, err
		}
		if m.File, err = modfile.Parse(m.GoMod, data, nil); err != nil {
			return nil, nil, err
		}
		m.Path = m.File.Module.Mod.Path
		want := rootPath
		if dir != "." {
			want += "/" + dir
		}
		if m.Path != want {
			errs = append(errs, fmt.Errorf("%s: module %s, want %s", rel(repo, m.GoMod), m.Path, want))
		}
		mods = append(mods, m)
	}
	for _, dir := range append(slices.Clone(released), unpublished...) {
		if !slices.ContainsFunc(mods, func(m mod) bool { return m.Dir == dir }) {
			errs = append(errs, fmt.Errorf("go.work does not use ./%s", dir))
		}
	}
	return wf, mods, errors.Join(errs...)
}

func releasedPaths(mods []mod) []string {
	var paths []string
	for _, m := range mods {
		if m.Released {
			paths = append(paths, m.Path)
		}
	}
	return paths
}

// checkVersion reports whether v can be the version of a release: a
// canonical semantic version of major version 0 or 1 (the module paths
// have no /vN suffix), from v0.1.0 on (the first release; v0.0.0 resolves
// only inside the workspace).
func checkVersion(v string) error {
	switch {
	case !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "":
		return fmt.Errorf("version %q is not a canonical semantic version like v0.1.0", v)
	case semver.Major(v) != "v0" && semver.Major(v) != "v1":
		return fmt.Errorf("version %s needs the module paths to end in /%s", v, semver.Major(v))
	case semver.Compare(v, "v0.1.0-0") < 0:
		return fmt.Errorf("version %s is below v0.1.0, the first release (v0.0.0 resolves only inside the workspace)", v)
	}
	return nil
}

// requiredVersion returns the version of the released modules that the
// nested modules require, which must be one version for all of them: the
// candidate of make release-check.
func requiredVersion(repo string, mods []mod) (string, error) {
	paths := releasedPaths(mods)
	seen := map[string][]string{}
	for _, m := range mods {
		for _, r := range m.File.Require {
			if slices.Contains(paths, r.Mod.Path) {
				seen[r.Mod.Version] = append(seen[r.Mod.Version], rel(repo, m.GoMod)+" requires "+r.Mod.Path+" "+r.Mod.Version)
			}
		}
	}
	switch len(seen) {
	case 0:
		return "", errors.New("no nested module requires a released module")
	case 1:
		for v := range seen {
			return v, checkVersion(v)
		}
	}
	var lines []string
	for _, l := range seen {
		lines = append(lines, l...)
	}
	slices.Sort(lines)
	return "", fmt.Errorf("the nested modules require different versions of the released modules; run make release VERSION=…:\n\t%s", strings.Join(lines, "\n\t"))
}

// checkRequires reports every way the modules' go.mod files would not
// resolve from outside the repository at version v: a requirement of a
// released module at another version (v0.0.0 among them), and a replace
// directive in a released module (go install …@version refuses a module
// that has one) or of a released module anywhere (go.work gives the
// working tree; a replace would hide a wrong requirement). It also checks
// that go.work gives the working tree for v.
func checkRequires(repo string, wf *modfile.WorkFile, mods []mod, v string) error {
	paths := releasedPaths(mods)
	var errs []error
	for _, m := range mods {
		if m.Released && !slices.ContainsFunc(wf.Replace, func(r *modfile.Replace) bool {
			return r.Old == module.Version{Path: m.Path, Version: v} && path.Clean(r.New.Path) == m.Dir
		}) {
			errs = append(errs, fmt.Errorf("go.work does not replace %s %s => ./%s (run make release VERSION=%s)", m.Path, v, m.Dir, v))
		}
	}
	for _, m := range mods {
		name := rel(repo, m.GoMod)
		for _, r := range m.File.Require {
			if slices.Contains(paths, r.Mod.Path) && r.Mod.Version != v {
				errs = append(errs, fmt.Errorf("%s requires %s %s, not the candidate %s (run make release VERSION=%s)", name, r.Mod.Path, r.Mod.Version, v, v))
			}
		}
		for _, r := range m.File.Replace {
			if m.Released || slices.Contains(paths, r.Old.Path) {
				errs = append(errs, fmt.Errorf("%s replaces %s: released modules resolve through the module proxy, and inside the repository through go.work", name, r.Old.Path))
			}
		}
	}
	return errors.Join(errs...)
}

// setRequires makes every requirement of a released module in mods
// require version v, drops replace directives of released modules, makes
// go.work replace each released module at v by its directory, and writes
// the files that changed.
func setRequires(repo string, wf *modfile.WorkFile, mods []mod, v string) (changed []string, err error) {
	paths := releasedPaths(mods)
	for _, r := range slices.Clone(wf.Replace) {
		if slices.Contains(paths, r.Old.Path) {
			if err := wf.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return changed, err
			}
		}
	}
	for _, m := range mods {
		if m.Released {
			if err := wf.AddReplace(m.Path, v, "./"+strings.TrimPrefix(m.Dir, "."), ""); err != nil {
				return changed, err
			}
		}
	}
	wf.Cleanup()
	workFile := filepath.Join(repo, "go.work")
	if err := os.WriteFile(workFile, modfile.Format(wf.Syntax), 0o644); err != nil {
		return changed, err
	}
	changed = append(changed, workFile)
	for _, m := range mods {
		dirty := false
		for _, r := range m.File.Require {
			if slices.Contains(paths, r.Mod.Path) && r.Mod.Version != v {
				if err := m.File.AddRequire(r.Mod.Path, v); err != nil {
					return changed, err
				}
				dirty = true
			}
		}
		for _, r := range slices.Clone(m.File.Replace) {
			if slices.Contains(paths, r.Old.Path) {
				if err := m.File.DropReplace(r.Old.Path, r.Old.Version); err != nil {
					return changed, err
				}
				dirty = true
			}
		}
		if !dirty {
			continue
		}
		m.File.Cleanup()
		data, err := m.File.Format()
		if err != nil {
			return changed, err
		}
		if err := os.WriteFile(m.GoMod, data, 0o644); err != nil {
			return changed, err
		}
		changed = append(changed, m.GoMod)
	}
	return changed, nil
}

func rel(repo, file string) string {
	if r, err := filepath.Rel(repo, file); err == nil {
		return filepath.ToSlash(r)
	}
	return file
}

// tidy runs go mod tidy in every module outside the workspace. A nested
// module requires a released version of the library that the module proxy
// may not serve yet (before its tag is pushed), so while tidy runs the
// released modules are replaced by their directories; the replace
// directives are dropped again afterwards, keeping what tidy changed.
func tidy(repo string, mods []mod) error {
	for _, m := range mods {
		orig, err := os.ReadFile(m.GoMod)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(m.GoMod, orig, nil)
		if err != nil {
			return err
		}
		var added []string
		for _, r := range mods {
			if !r.Released || r.Dir == m.Dir || f.Replace != nil && slices.ContainsFunc(f.Replace, func(x *modfile.Replace) bool { return x.Old.Path == r.Path }) {
				continue
			}
			target, err := filepath.Rel(filepath.Dir(m.GoMod), filepath.Join(repo, filepath.FromSlash(r.Dir)))
			if err != nil {
				return err
			}
			target = filepath.ToSlash(target)
			if !strings.HasPrefix(target, ".") {
				target = "./" + target
			}
			if err := f.AddReplace(r.Path, "", target, ""); err != nil {
				return err
			}
			added = append(added, r.Path)
		}
		if err := writeModFile(m.GoMod, f); err != nil {
			return err
		}
		cmd := exec.Command("go", "mod", "tidy")
		cmd.Dir = filepath.Dir(m.GoMod)
		cmd.Env = append(os.Environ(), "GOWORK=off")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		tidyErr := cmd.Run()
		data, err := os.ReadFile(m.GoMod)
		if err != nil {
			return err
		}
		if tidyErr != nil {
			data = orig
		}
		if f, err = modfile.Parse(m.GoMod, data, nil); err != nil {
			return err
		}
		for _, p := range added {
			if err := f.DropReplace(p, ""); err != nil {
				return err
			}
		}
		if err := writeModFile(m.GoMod, f); err != nil {
			return err
		}
		if tidyErr != nil {
			return fmt.Errorf("go mod tidy in %s: %w", rel(repo, filepath.Dir(m.GoMod)), tidyErr)
		}
	}
	return nil
}

func writeModFile(file string, f *modfile.File) error {
	f.Cleanup()
	data, err := f.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}
