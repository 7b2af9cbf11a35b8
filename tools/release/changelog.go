package main

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
)

var (
	unreleasedHeading = regexp.MustCompile(`(?m)^## Unreleased[ \t]*\n`)
	nextHeading       = regexp.MustCompile(`(?m)^## `)
)

// cutChangelog moves the entries under the changelog's "## Unreleased"
// heading under a heading of version v and date, leaving an empty
// "## Unreleased" above it for the next changes. The entries start with
// head, when given (the list of incompatible API changes).
func cutChangelog(changelog []byte, v, date, head string) ([]byte, error) {
	loc := unreleasedHeading.FindIndex(changelog)
	if loc == nil {
		return nil, errors.New(`CHANGELOG.md has no "## Unreleased" heading`)
	}
	if regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(v) + `\b`).Match(changelog) {
		return nil, fmt.Errorf("CHANGELOG.md already has a section for %s", v)
	}
	body := changelog[loc[1]:]
	if next := nextHeading.FindIndex(body); next != nil {
		body = body[:next[0]]
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New(`CHANGELOG.md: nothing under "## Unreleased" to release`)
	}
	var out bytes.Buffer
	out.Write(changelog[:loc[1]])
	fmt.Fprintf(&out, "\n## %s — %s\n", v, date)
	if head != "" {
		fmt.Fprintf(&out, "\n%s", head)
	}
	out.Write(changelog[loc[1]:])
	return out.Bytes(), nil
}
