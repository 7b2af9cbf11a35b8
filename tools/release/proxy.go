package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// writeProxy writes, under out, a module proxy in the layout GOPROXY=file://
// reads (MODULE/@v/list, VERSION.info, VERSION.mod, VERSION.zip) holding
// version v of every released module in mods, made from the working tree
// of repo: its files that git tracks or would track (what a commit of the
// tree would hold), as the module proxy serves a tag of that commit. It
// writes out/sums.txt too: a line "MODULE VERSION h1:…" per module, the
// hash go.sum and a binary's build information record for the zip.
func writeProxy(repo string, mods []mod, v, out string, log io.Writer) error {
	when, err := commitTime(repo)
	if err != nil {
		return err
	}
	var sums []string
	for _, m := range mods {
		if !m.Released {
			continue
		}
		files, err := moduleFiles(repo, m.Dir)
		if err != nil {
			return err
		}
		var zbuf bytes.Buffer
		mv := module.Version{Path: m.Path, Version: v}
		if err := modzip.Create(&zbuf, mv, files); err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
		gomod, err := os.ReadFile(m.GoMod)
		if err != nil {
			return err
		}
		info, err := json.Marshal(struct {
			Version string
			Time    time.Time
		}{v, when})
		if err != nil {
			return err
		}
		escaped, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		dir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for name, data := range map[string][]byte{
			v + ".info": info,
			v + ".mod":  gomod,
			v + ".zip":  zbuf.Bytes(),
		} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return err
			}
		}
		if err := addToList(filepath.Join(dir, "list"), v); err != nil {
			return err
		}
		sum, err := dirhash.HashZip(filepath.Join(dir, v+".zip"), dirhash.Hash1)
		if err != nil {
			return err
		}
		sums = append(sums, fmt.Sprintf("%s %s %s\n", m.Path, v, sum))
		zr, err := zip.NewReader(bytes.NewReader(zbuf.Bytes()), int64(zbuf.Len()))
		if err != nil {
			return err
		}
		fmt.Fprintf(log, "proxy: %s@%s: %d files, %d bytes zipped, %s\n", m.Path, v, len(zr.File), zbuf.Len(), sum)
	}
	return os.WriteFile(filepath.Join(out, "sums.txt"), []byte(strings.Join(sums, "")), 0o644)
}

func addToList(file, v string) error {
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(data))
	if slices.Contains(versions, v) {
		return nil
	}
	versions = append(versions, v)
	return os.WriteFile(file, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// commitTime returns the time of the repository's HEAD commit, the time a
// tag of it would carry; the current time where there is no commit.
func commitTime(repo string) (time.Time, error) {
	out, err := git(repo, "log", "-1", "--format=%cI")
	if err != nil || strings.TrimSpace(string(out)) == "" {
		return time.Now().UTC().Truncate(time.Second), nil
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out)))
	return t.UTC(), err
}

// moduleFiles lists the files of the module in dir (relative to repo) as
// a tag would hold them: the files git tracks or would track (tracked,
// and untracked files not ignored) that exist in the working tree, read
// from it. modzip.Create then leaves out what the go command leaves out:
// files of nested modules, vendored packages, irregular files. Like the go
// command, a nested module without a LICENSE of its own gets the
// repository's.
func moduleFiles(repo, dir string) ([]modzip.File, error) {
	out, err := git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", dir)
	if err != nil {
		return nil, err
	}
	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	var files []modzip.File
	seen := map[string]bool{}
	haveLicense := false
	for _, p := range strings.Split(string(out), "\x00") {
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		name, ok := strings.CutPrefix(p, prefix)
		if !ok {
			return nil, fmt.Errorf("git listed %s outside %s", p, dir)
		}
		f, err := newDiskFile(filepath.Join(repo, filepath.FromSlash(p)), name)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		} else if err != nil {
			return nil, err
		}
		files = append(files, f)
		haveLicense = haveLicense || name == "LICENSE"
	}
	if dir != "." && !haveLicense {
		f, err := newDiskFile(filepath.Join(repo, "LICENSE"), "LICENSE")
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		} else if err == nil {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no files in %s", path.Join(repo, dir))
	}
	return files, nil
}

// diskFile is a modzip.File read from the working tree.
type diskFile struct {
	file, name string
	info       os.FileInfo
}

func newDiskFile(file, name string) (diskFile, error) {
	info, err := os.Lstat(file)
	return diskFile{file, name, info}, err
}

func (f diskFile) Path() string                 { return f.name }
func (f diskFile) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.file) }

func git(repo string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
