package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/types"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/semver"
	"golang.org/x/tools/go/packages"
)

// The exported API of the released modules is recorded in api/, one line
// per exported feature, as the Go project records the standard library's
// (its api/ directory):
//
//	api/current.txt   the API of the working tree; make api writes it, and
//	                  make release-check fails when the code differs
//	api/VERSION.txt   the API of release VERSION, a copy of current.txt
//	                  that make release VERSION=… keeps
//
// A line is "pkg PATH, FEATURE", FEATURE one of
//
//	const NAME TYPE               const NAME = VALUE
//	var NAME TYPE                 func NAME[TPARAMS](PARAMS) RESULTS
//	type NAME[TPARAMS] KIND       type NAME = TYPE (an alias)
//	type NAME struct, FIELD TYPE  type NAME struct, embedded TYPE
//	type NAME interface, METHOD(PARAMS) RESULTS
//	method (RECV) NAME(PARAMS) RESULTS
//
// with parameters unnamed, types of the package itself unqualified, of the
// standard library by package name, of any other package by import path.
// Methods are the type's whole method set, promoted ones included.
const (
	apiDir     = "api"
	apiCurrent = "current.txt"
)

// apiHowTo is what the check says when the code and api/ differ.
const apiHowTo = "if the change is meant, run `make api` and commit api/current.txt with it: the diff is the change's review. A release lists the incompatible changes since the previous one in the CHANGELOG (make release VERSION=… does it)."

// apiPackages loads the library packages of the released modules in mods,
// from the working tree of repo through its go.work: every package but
// commands and internal ones. It returns them by module path.
func apiPackages(repo string, mods []mod) (map[string][]*types.Package, error) {
	var patterns []string
	for _, m := range mods {
		if m.Released {
			patterns = append(patterns, "./"+strings.TrimPrefix(path.Join(m.Dir, "..."), "./"))
		}
	}
	env := append(os.Environ(), "GOWORK="+filepath.Join(repo, "go.work"))
	return loadAPI(repo, env, releasedPaths(mods), patterns)
}

// loadAPI loads patterns in dir with env and returns the library packages
// of the modules in modPaths, by module.
func loadAPI(dir string, env []string, modPaths, patterns []string) (map[string][]*types.Package, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
		Dir:  dir,
		Env:  env,
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, err
	}
	out := map[string][]*types.Package{}
	var errs []error
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, fmt.Errorf("%s: %v", p.PkgPath, e))
		}
		if p.Module == nil || !slices.Contains(modPaths, p.Module.Path) || p.Name == "main" || isInternal(p.PkgPath) || p.Types == nil {
			continue
		}
		out[p.Module.Path] = append(out[p.Module.Path], p.Types)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b *types.Package) int { return strings.Compare(a.Path(), b.Path()) })
	}
	return out, nil
}

func isInternal(pkgPath string) bool {
	return slices.Contains(strings.Split(pkgPath, "/"), "internal")
}

// apiFeatures returns the sorted feature lines of every package in pkgs.
func apiFeatures(pkgs map[string][]*types.Package) []string {
	var lines []string
	for _, ps := range pkgs {
		for _, p := range ps {
			for _, f := range packageFeatures(p) {
				lines = append(lines, "pkg "+p.Path()+", "+f)
			}
		}
	}
	slices.Sort(lines)
	return slices.Compact(lines)
}

// packageFeatures lists the exported features of p.
func packageFeatures(p *types.Package) []string {
	w := &typeWriter{pkg: p}
	var fs []string
	scope := p.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			fs = append(fs, "const "+name+" "+w.str(obj.Type()), "const "+name+" = "+obj.Val().ExactString())
		case *types.Var:
			fs = append(fs, "var "+name+" "+w.str(obj.Type()))
		case *types.Func:
			fs = append(fs, "func "+name+w.sig(obj.Type().(*types.Signature)))
		case *types.TypeName:
			fs = append(fs, typeFeatures(w, obj)...)
		}
	}
	return fs
}

func typeFeatures(w *typeWriter, obj *types.TypeName) []string {
	name := obj.Name()
	if obj.IsAlias() {
		a, _ := obj.Type().(*types.Alias)
		if a != nil {
			return []string{"type " + name + w.tparams(a.TypeParams()) + " = " + w.str(a.Rhs())}
		}
		return []string{"type " + name + " = " + w.str(obj.Type())}
	}
	named := obj.Type().(*types.Named)
	head := "type " + name + w.tparams(named.TypeParams())
	var fs []string
	switch u := named.Underlying().(type) {
	case *types.Struct:
		fs = append(fs, head+" struct")
		fs = append(fs, structFields(w, head, u, map[*types.Struct]bool{})...)
	case *types.Interface:
		var methods []string
		unexported := false
		for m := range u.Methods() { // sorted, embedded ones included
			if m.Exported() {
				methods = append(methods, m.Name())
				fs = append(fs, head+" interface, "+m.Name()+w.sig(m.Type().(*types.Signature)))
			} else {
				unexported = true
			}
		}
		if unexported {
			fs = append(fs, head+" interface, unexported methods")
		}
		if !u.IsMethodSet() {
			fs = append(fs, head+" interface, type set "+w.str(u))
		}
		if len(methods) == 0 {
			fs = append(fs, head+" interface {}")
		} else {
			fs = append(fs, head+" interface { "+strings.Join(methods, ", ")+" }")
		}
	default:
		fs = append(fs, head+" "+w.str(u))
	}
	// The method set of T and the methods *T adds.
	var recv types.Type = named
	if tps := named.TypeParams(); tps.Len() > 0 {
		args := make([]types.Type, tps.Len())
		for i := range args {
			args[i] = tps.At(i)
		}
		recv, _ = types.Instantiate(nil, named, args, false)
	}
	if _, isIface := named.Underlying().(*types.Interface); !isIface {
		valueSet := types.NewMethodSet(recv)
		for _, ptr := range []bool{false, true} {
			ms := valueSet
			rs := w.str(recv)
			if ptr {
				ms = types.NewMethodSet(types.NewPointer(recv))
				rs = "*" + rs
			}
			for sel := range ms.Methods() {
				m := sel.Obj().(*types.Func)
				if !m.Exported() || ptr && valueSet.Lookup(m.Pkg(), m.Name()) != nil {
					continue
				}
				fs = append(fs, "method ("+rs+") "+m.Name()+w.sig(m.Signature()))
			}
		}
	}
	return fs
}

// structFields lists the exported fields of s and its embedded fields,
// and the exported fields that embedded fields of unexported struct types
// promote (their methods are in the method set).
func structFields(w *typeWriter, head string, s *types.Struct, seen map[*types.Struct]bool) []string {
	seen[s] = true
	var fs []string
	for f := range s.Fields() {
		switch {
		case f.Embedded() && (f.Exported() || !types.IsInterface(f.Type()) && hasExportedMembers(f.Type())):
			fs = append(fs, head+" struct, embedded "+w.str(f.Type()))
			if f.Exported() {
				continue
			}
			t := f.Type()
			if p, ok := t.(*types.Pointer); ok {
				t = p.Elem()
			}
			if inner, ok := t.Underlying().(*types.Struct); ok && !seen[inner] {
				fs = append(fs, structFields(w, head, inner, seen)...)
			}
		case f.Exported():
			fs = append(fs, head+" struct, "+f.Name()+" "+w.str(f.Type()))
		}
	}
	return fs
}

// hasExportedMembers reports whether an embedded field of unexported type t
// promotes exported fields or methods.
func hasExportedMembers(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	for sel := range types.NewMethodSet(types.NewPointer(t)).Methods() {
		if sel.Obj().Exported() {
			return true
		}
	}
	if s, ok := t.Underlying().(*types.Struct); ok {
		for f := range s.Fields() {
			if f.Exported() {
				return true
			}
		}
	}
	return false
}

// typeWriter writes types as the api/ files spell them.
type typeWriter struct {
	pkg *types.Package
	buf bytes.Buffer
}

func (w *typeWriter) str(t types.Type) string {
	w.buf.Reset()
	w.typ(t)
	return w.buf.String()
}

func (w *typeWriter) sig(s *types.Signature) string {
	w.buf.Reset()
	w.buf.WriteString(w.tparams(s.TypeParams()))
	w.signature(s)
	return w.buf.String()
}

func (w *typeWriter) tparams(tps *types.TypeParamList) string {
	if tps.Len() == 0 {
		return ""
	}
	sub := &typeWriter{pkg: w.pkg}
	sub.buf.WriteByte('[')
	for i := range tps.Len() {
		if i > 0 {
			sub.buf.WriteString(", ")
		}
		tp := tps.At(i)
		sub.buf.WriteString(tp.Obj().Name() + " ")
		sub.typ(tp.Constraint())
	}
	sub.buf.WriteByte(']')
	return sub.buf.String()
}

func (w *typeWriter) qualified(obj *types.TypeName) {
	if p := obj.Pkg(); p != nil && p != w.pkg {
		if strings.Contains(strings.Split(p.Path(), "/")[0], ".") {
			w.buf.WriteString(p.Path())
		} else {
			w.buf.WriteString(p.Name())
		}
		w.buf.WriteByte('.')
	}
	w.buf.WriteString(obj.Name())
}

func (w *typeWriter) typeArgs(args *types.TypeList) {
	if args.Len() == 0 {
		return
	}
	w.buf.WriteByte('[')
	for i := range args.Len() {
		if i > 0 {
			w.buf.WriteString(", ")
		}
		w.typ(args.At(i))
	}
	w.buf.WriteByte(']')
}

func (w *typeWriter) typ(t types.Type) {
	switch t := t.(type) {
	case *types.Basic:
		if t.Kind() == types.UnsafePointer {
			w.buf.WriteString("unsafe.Pointer")
		} else {
			w.buf.WriteString(t.Name())
		}
	case *types.Alias:
		w.qualified(t.Obj())
		w.typeArgs(t.TypeArgs())
	case *types.Named:
		w.qualified(t.Obj())
		w.typeArgs(t.TypeArgs())
	case *types.TypeParam:
		w.buf.WriteString(t.Obj().Name())
	case *types.Pointer:
		w.buf.WriteByte('*')
		w.typ(t.Elem())
	case *types.Slice:
		w.buf.WriteString("[]")
		w.typ(t.Elem())
	case *types.Array:
		fmt.Fprintf(&w.buf, "[%d]", t.Len())
		w.typ(t.Elem())
	case *types.Map:
		w.buf.WriteString("map[")
		w.typ(t.Key())
		w.buf.WriteByte(']')
		w.typ(t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendRecv:
			w.buf.WriteString("chan ")
		case types.SendOnly:
			w.buf.WriteString("chan<- ")
		case types.RecvOnly:
			w.buf.WriteString("<-chan ")
		}
		w.typ(t.Elem())
	case *types.Signature:
		w.buf.WriteString("func")
		w.signature(t)
	case *types.Struct:
		w.buf.WriteString("struct{")
		for i := range t.NumFields() {
			if i > 0 {
				w.buf.WriteString("; ")
			}
			f := t.Field(i)
			if !f.Embedded() {
				w.buf.WriteString(f.Name() + " ")
			}
			w.typ(f.Type())
		}
		w.buf.WriteByte('}')
	case *types.Interface:
		if t.Empty() {
			w.buf.WriteString("interface{}")
			return
		}
		w.buf.WriteString("interface{ ")
		n := 0
		sep := func() {
			if n > 0 {
				w.buf.WriteString("; ")
			}
			n++
		}
		for m := range t.ExplicitMethods() {
			sep()
			w.buf.WriteString(m.Name())
			w.signature(m.Type().(*types.Signature))
		}
		for e := range t.EmbeddedTypes() {
			sep()
			w.typ(e)
		}
		w.buf.WriteString(" }")
	case *types.Union:
		for i := range t.Len() {
			if i > 0 {
				w.buf.WriteString(" | ")
			}
			if t.Term(i).Tilde() {
				w.buf.WriteByte('~')
			}
			w.typ(t.Term(i).Type())
		}
	case *types.Tuple:
		w.tuple(t, false)
	default:
		w.buf.WriteString(types.TypeString(t, types.RelativeTo(w.pkg)))
	}
}

// signature writes s's parameters and results, unnamed.
func (w *typeWriter) signature(s *types.Signature) {
	w.tuple(s.Params(), s.Variadic())
	switch r := s.Results(); r.Len() {
	case 0:
	case 1:
		w.buf.WriteByte(' ')
		w.typ(r.At(0).Type())
	default:
		w.buf.WriteByte(' ')
		w.tuple(r, false)
	}
}

func (w *typeWriter) tuple(t *types.Tuple, variadic bool) {
	w.buf.WriteByte('(')
	for i := range t.Len() {
		if i > 0 {
			w.buf.WriteString(", ")
		}
		if variadic && i == t.Len()-1 {
			w.buf.WriteString("...")
			w.typ(t.At(i).Type().(*types.Slice).Elem())
			continue
		}
		w.typ(t.At(i).Type())
	}
	w.buf.WriteByte(')')
}

// apiFile is the file of api/ that records the API of the working tree.
func apiFile(repo string) string { return filepath.Join(repo, apiDir, apiCurrent) }

// writeAPI writes the API of the working tree into api/current.txt.
func writeAPI(repo string, mods []mod) ([]string, error) {
	pkgs, err := apiPackages(repo, mods)
	if err != nil {
		return nil, err
	}
	lines := apiFeatures(pkgs)
	if err := os.MkdirAll(filepath.Join(repo, apiDir), 0o755); err != nil {
		return nil, err
	}
	return lines, os.WriteFile(apiFile(repo), []byte(joinLines(lines)), 0o644)
}

func joinLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// checkAPI reports every difference between the API of the working tree
// and api/current.txt: a feature the code has and the file does not
// (+), and one the file has and the code does not (-).
func checkAPI(repo string, mods []mod) error {
	pkgs, err := apiPackages(repo, mods)
	if err != nil {
		return err
	}
	got := apiFeatures(pkgs)
	data, err := os.ReadFile(apiFile(repo))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s/%s is missing: run `make api` and commit it", apiDir, apiCurrent)
	} else if err != nil {
		return err
	}
	recorded := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(data) == 0 {
		recorded = nil
	}
	var diff []string
	for _, l := range got {
		if !slices.Contains(recorded, l) {
			diff = append(diff, "+"+l)
		}
	}
	for _, l := range recorded {
		if !slices.Contains(got, l) {
			diff = append(diff, "-"+l)
		}
	}
	if !slices.IsSorted(recorded) && len(diff) == 0 {
		diff = append(diff, "(the lines are out of order)")
	}
	if len(diff) == 0 {
		return nil
	}
	slices.SortStableFunc(diff, func(a, b string) int { return strings.Compare(a[1:], b[1:]) })
	return fmt.Errorf("the exported API differs from %s/%s (+ in the code only, - in the file only):\n\t%s\n%s",
		apiDir, apiCurrent, strings.Join(diff, "\n\t"), apiHowTo)
}

var releaseAPIFile = regexp.MustCompile(`^(v[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?)\.txt$`)

// previousRelease returns the release before v: the newest of the
// releases below v whose API api/ keeps (api/VERSION.txt), and of the
// version the modules require of the released modules when it is below v
// (between releases they require the last one); "" before the first.
func previousRelease(repo string, mods []mod, v string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(repo, apiDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	prev := ""
	for _, e := range entries {
		m := releaseAPIFile.FindStringSubmatch(e.Name())
		if m == nil || !semver.IsValid(m[1]) || semver.Compare(m[1], v) >= 0 {
			continue
		}
		if semver.Compare(m[1], prev) > 0 {
			prev = m[1]
		}
	}
	if req, err := requiredVersion(repo, mods); err == nil && semver.Compare(req, v) < 0 && semver.Compare(req, prev) > 0 {
		prev = req
	}
	return prev, nil
}

// releaseModules returns the modules among mods whose packages the API
// file lists.
func releaseModules(apiFileData []byte, mods []mod) []string {
	var paths []string
	for _, l := range strings.Split(string(apiFileData), "\n") {
		pkgPath, _, ok := strings.Cut(strings.TrimPrefix(l, "pkg "), ", ")
		if !ok {
			continue
		}
		best := ""
		for _, m := range mods {
			if m.Released && (pkgPath == m.Path || strings.HasPrefix(pkgPath, m.Path+"/")) && len(m.Path) > len(best) {
				best = m.Path
			}
		}
		if best != "" && !slices.Contains(paths, best) {
			paths = append(paths, best)
		}
	}
	slices.Sort(paths)
	return paths
}

// apiDiff compares, with apidiff, the released modules of release prev —
// as the module proxy serves them (GOPROXY), what users have — with the
// working tree, and returns the incompatible changes, each naming its
// object by package path.
//
// The previous release's packages need type information, which its API
// file alone does not give; the module proxy serves them to any clone,
// shallow or without tags, and the checksum database vouches that they are
// what was released.
func apiDiff(repo string, mods []mod, prev string) ([]string, error) {
	newPkgs, err := apiPackages(repo, mods)
	if err != nil {
		return nil, err
	}
	// The modules that had packages in prev: as its API file says, or,
	// without one, those that have packages now.
	var oldPaths []string
	data, err := os.ReadFile(filepath.Join(repo, apiDir, prev+".txt"))
	switch {
	case err == nil:
		oldPaths = releaseModules(data, mods)
	case errors.Is(err, os.ErrNotExist):
		oldPaths = slices.Sorted(maps.Keys(newPkgs))
	default:
		return nil, err
	}
	oldPkgs := map[string][]*types.Package{}
	if len(oldPaths) > 0 {
		if oldPkgs, err = loadRelease(oldPaths, prev); err != nil {
			return nil, fmt.Errorf("loading release %s from the module proxy: %w", prev, err)
		}
	}
	var out []string
	for _, m := range mods {
		if !m.Released {
			continue
		}
		old := &apidiff.Module{Path: m.Path, Packages: oldPkgs[m.Path]}
		cur := &apidiff.Module{Path: m.Path, Packages: newPkgs[m.Path]}
		for _, c := range apidiff.ModuleChanges(old, cur).Changes {
			if !c.Compatible {
				out = append(out, qualifyChange(m.Path, c.Message))
			}
		}
	}
	return out, nil
}

// qualifyChange spells the object an apidiff message of module modPath
// names by its full package path: apidiff names it relative to the module
// ("./store.Store: removed", "Do: removed" in the root package).
func qualifyChange(modPath, msg string) string {
	switch {
	case strings.HasPrefix(msg, "package "):
		return msg
	case strings.HasPrefix(msg, "./"):
		return modPath + "/" + msg[2:]
	default:
		return modPath + "." + msg
	}
}

// loadRelease loads the library packages of modules at version v from the
// module proxy, in a module of a temporary directory that requires them,
// outside any workspace.
func loadRelease(modPaths []string, v string) (map[string][]*types.Package, error) {
	dir, err := os.MkdirTemp("", "idemguard-apidiff-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	gomod := "module apidiff.invalid/previous\n\ngo 1.26.0\n\nrequire (\n"
	var patterns []string
	for _, p := range modPaths {
		gomod += "\t" + p + " " + v + "\n"
		patterns = append(patterns, p+"/...")
	}
	gomod += ")\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
	return loadAPI(dir, env, modPaths, patterns)
}

// incompatibleSection is the CHANGELOG subsection make release writes
// under a release's heading.
func incompatibleSection(prev string, changes []string) string {
	if len(changes) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### Incompatible API changes since %s (apidiff)\n\n", prev)
	for _, c := range changes {
		fmt.Fprintf(&b, "- `%s`\n", c)
	}
	return b.String()
}
