// Command release prepares and checks a release of idemguard's modules
// (docs/releasing.md). Run it from anywhere in the repository:
//
//	release prepare VERSION   make every module require VERSION of the
//	                          released modules, move the CHANGELOG's
//	                          Unreleased section under VERSION with
//	                          today's date, and print the tags to push
//	release require VERSION   make every module require VERSION of the
//	                          released modules (prepare does it too)
//	release tidy              go mod tidy in every module, with the
//	                          released modules replaced by their
//	                          directories while it runs
//	release version           print the version the modules require of
//	                          the released modules: the release candidate
//	release check VERSION     check that every module requires VERSION of
//	                          the released modules, and that no released
//	                          module has a replace directive
//	release proxy VERSION DIR write into DIR a file-system module proxy
//	                          (GOPROXY=file://DIR) of every released
//	                          module at VERSION, made from the working
//	                          tree as the module proxy serves a tag
//	release tags VERSION      print the tags of VERSION, one a line
//	release api               write the exported API of the released
//	                          modules into api/current.txt (make api)
//	release api check         fail, showing the difference, when the
//	                          exported API differs from api/current.txt
//	release apidiff VERSION   print the incompatible changes since
//	                          release VERSION (apidiff against the module
//	                          proxy's copy of it)
//
// The released modules are the library, cmd/idemguard, lambdaguard and watermillguard;
// the others of go.work are the repository's own (see modules.go).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: release prepare|require|tidy|version|check|proxy|tags|api|apidiff …")
	}
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	wf, mods, err := workspace(repo)
	if err != nil {
		return err
	}
	need := func(n int) error {
		if len(args)-1 != n {
			return fmt.Errorf("%s takes %d argument(s)", args[0], n)
		}
		if n > 0 {
			return checkVersion(args[1])
		}
		return nil
	}
	switch args[0] {
	case "version":
		if err := need(0); err != nil {
			return err
		}
		v, err := requiredVersion(repo, mods)
		if err != nil {
			return err
		}
		fmt.Println(v)
	case "check":
		if err := need(1); err != nil {
			return err
		}
		return checkRequires(repo, wf, mods, args[1])
	case "tags":
		if err := need(1); err != nil {
			return err
		}
		for _, m := range mods {
			if m.Released {
				fmt.Println(m.Tag(args[1]))
			}
		}
	case "proxy":
		if len(args) != 3 {
			return errors.New("usage: release proxy VERSION DIR")
		}
		if err := checkVersion(args[1]); err != nil {
			return err
		}
		if err := checkRequires(repo, wf, mods, args[1]); err != nil {
			return err
		}
		return writeProxy(repo, mods, args[1], args[2], os.Stdout)
	case "api":
		switch {
		case len(args) == 1:
			lines, err := writeAPI(repo, mods)
			if err != nil {
				return err
			}
			fmt.Printf("wrote %s: %d features\n", rel(repo, apiFile(repo)), len(lines))
		case len(args) == 2 && args[1] == "check":
			if err := checkAPI(repo, mods); err != nil {
				return err
			}
			fmt.Printf("api: the exported API matches %s\n", rel(repo, apiFile(repo)))
		default:
			return errors.New("usage: release api [check]")
		}
	case "apidiff":
		if err := need(1); err != nil {
			return err
		}
		changes, err := apiDiff(repo, mods, args[1])
		if err != nil {
			return err
		}
		for _, c := range changes {
			fmt.Println(c)
		}
	case "require":
		if err := need(1); err != nil {
			return err
		}
		changed, err := setRequires(repo, wf, mods, args[1])
		for _, f := range changed {
			fmt.Printf("updated %s\n", rel(repo, f))
		}
		return err
	case "tidy":
		if err := need(0); err != nil {
			return err
		}
		return tidy(repo, mods)
	case "prepare":
		if err := need(1); err != nil {
			return err
		}
		return prepare(repo, wf, mods, args[1], time.Now().Format(time.DateOnly), os.Stdout)
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
	return nil
}

// prepare makes the release of version v: requirements, CHANGELOG, tags.
func prepare(repo string, wf *modfile.WorkFile, mods []mod, v, date string, w io.Writer) error {
	clFile := filepath.Join(repo, "CHANGELOG.md")
	cl, err := os.ReadFile(clFile)
	if err != nil {
		return err
	}
	// The API: recorded in api/current.txt, and compared with the previous
	// release's; its incompatible changes head the release's section.
	if err := checkAPI(repo, mods); err != nil {
		return err
	}
	prev, err := previousRelease(repo, mods, v)
	if err != nil {
		return err
	}
	var incompatible []string
	if prev != "" {
		if incompatible, err = apiDiff(repo, mods, prev); err != nil {
			return err
		}
	}
	if len(incompatible) > 0 && semver.MajorMinor(prev) == semver.MajorMinor(v) {
		return fmt.Errorf("%s would be a patch release of %s, which breaks nothing, but apidiff finds incompatible changes since %s:\n\t%s\nrelease a new minor version instead, or undo them",
			v, semver.MajorMinor(prev), prev, strings.Join(incompatible, "\n\t"))
	}
	if cl, err = cutChangelog(cl, v, date, incompatibleSection(prev, incompatible)); err != nil {
		return err
	}
	changed, err := setRequires(repo, wf, mods, v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(clFile, cl, 0o644); err != nil {
		return err
	}
	current, err := os.ReadFile(apiFile(repo))
	if err != nil {
		return err
	}
	releaseAPI := filepath.Join(repo, apiDir, v+".txt")
	if err := os.WriteFile(releaseAPI, current, 0o644); err != nil {
		return err
	}
	changed = append(changed, releaseAPI)
	for _, f := range changed {
		fmt.Fprintf(w, "updated %s\n", rel(repo, f))
	}
	fmt.Fprintf(w, "updated CHANGELOG.md: ## %s — %s\n", v, date)
	switch {
	case prev == "":
		fmt.Fprintf(w, "no earlier release in %s/: no API comparison\n\n", apiDir)
	case len(incompatible) == 0:
		fmt.Fprintf(w, "apidiff: no incompatible change since %s\n\n", prev)
	default:
		fmt.Fprintf(w, "apidiff: %d incompatible change(s) since %s, listed in the CHANGELOG under %s; check that the entries above them say what replaces each:\n", len(incompatible), prev, v)
		for _, c := range incompatible {
			fmt.Fprintf(w, "\t%s\n", c)
		}
		fmt.Fprintln(w)
	}
	var tags []string
	for _, m := range mods {
		if m.Released {
			tags = append(tags, m.Tag(v))
		}
	}
	fmt.Fprintf(w, "Check the release from outside the repository, commit, tag each released module, push:\n\n")
	fmt.Fprintf(w, "\tmake release-check VERSION=%s\n", v)
	fmt.Fprintf(w, "\tgit add %s/%s.txt && git commit -am 'Release %s'\n", apiDir, v, v)
	for _, t := range tags {
		fmt.Fprintf(w, "\tgit tag -a -m 'idemguard %s' %s\n", v, t)
	}
	fmt.Fprintf(w, "\tgit push origin %s\n", strings.Join(tags, " "))
	return nil
}

// repoRoot returns the top of the git work tree holding the current
// directory.
func repoRoot() (string, error) {
	out, err := git(".", "rev-parse", "--show-toplevel")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}
