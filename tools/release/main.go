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
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: release prepare|require|tidy|version|check|proxy|tags …")
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
	if cl, err = cutChangelog(cl, v, date); err != nil {
		return err
	}
	changed, err := setRequires(repo, wf, mods, v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(clFile, cl, 0o644); err != nil {
		return err
	}
	for _, f := range changed {
		fmt.Fprintf(w, "updated %s\n", rel(repo, f))
	}
	fmt.Fprintf(w, "updated CHANGELOG.md: ## %s — %s\n\n", v, date)
	var tags []string
	for _, m := range mods {
		if m.Released {
			tags = append(tags, m.Tag(v))
		}
	}
	fmt.Fprintf(w, "Check the release from outside the repository, commit, tag each released module, push:\n\n")
	fmt.Fprintf(w, "\tmake release-check VERSION=%s\n", v)
	fmt.Fprintf(w, "\tgit commit -am 'Release %s'\n", v)
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
