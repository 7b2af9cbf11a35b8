#!/usr/bin/env bash
# vulncheck.sh [PATTERN...] — govulncheck over every module of the workspace
# (default: the packages of every module go.work uses), failing on any known
# vulnerability the code reaches.
#
# The vulnerability database is the Go project's own: the OSV files of the
# module golang.org/x/vulndb, fetched through the module proxy at its newest
# version (VULNDB_VERSION pins one), so the check needs nothing but the
# module proxy. The standard library is judged as the toolchain named by
# go.work's toolchain line builds it (fetched through the module proxy
# once): the release builds use it, and so does a contributor's go with the
# default GOTOOLCHAIN=auto.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/release-tools.sh

govulncheck=$(go_tool govulncheck golang.org/x/vuln/cmd/govulncheck "$GOVULNCHECK_VERSION")
db=$(vulndb)
goroot=$(release_goroot)
if [ $# -eq 0 ]; then
	for dir in $(go work edit -json | sed -n 's/^[[:space:]]*"DiskPath": "\(.*\)"$/\1/p'); do
		if [ "$dir" = . ]; then set -- "$@" ./...; else set -- "$@" "$dir/..."; fi
	done
fi
echo "vulncheck: $("$goroot/bin/go" version | cut -d' ' -f3): $*" >&2
PATH="$goroot/bin:$PATH" GOTOOLCHAIN=local exec "$govulncheck" -db "file://$db" "$@"
