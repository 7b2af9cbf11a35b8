# release-tools.sh — sourced by release-check.sh and vulncheck.sh: installs
# the release tools with `go install`, cached outside the clone and keyed by
# version like harness.sh's tools (${XDG_CACHE_HOME:-$HOME/.cache}/idemguard/),
# so a fresh clone on the same machine reuses them.

GOVULNCHECK_VERSION=v1.9.0
# goreleaser v2.16 and later depend on a module whose host the module proxy
# here refuses (go.digitalxero.dev/go-msix, through nfpm), and v2.18 on Go 1.27.
GORELEASER_VERSION=v2.15.0

# A failure inside $(…) fails the script that sourced this file.
shopt -s inherit_errexit

TOOLS_CACHE="${IDEMGUARD_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idemguard}"
mkdir -p "$TOOLS_CACHE"

# release_tool runs tools/release (its commands: tools/release/main.go)
# in its own module, outside the workspace, so that it reports a broken
# workspace (a module requiring v0.0.0) instead of failing to load it.
release_tool() {
	(cd "$(git rev-parse --show-toplevel)/tools" && GOWORK=off go run ./release "$@")
}

# go_tool NAME PACKAGE VERSION prints the path of NAME built from
# PACKAGE@VERSION, building it first (once per machine and version).
go_tool() {
	local name=$1 pkg=$2 version=$3 dir
	dir="$TOOLS_CACHE/$name-$version"
	if [ ! -x "$dir/$name" ]; then
		printf 'release-tools: building %s %s into %s (once per machine)\n' "$name" "$version" "$dir" >&2
		mkdir -p "$dir"
		(cd "$dir" && GOBIN="$dir" GOWORK=off GOFLAGS=-buildvcs=false go install "$pkg@$version") >&2
	fi
	echo "$dir/$name"
}

# vulndb prints the directory of OSV files of the Go vulnerability database:
# data/osv of the module golang.org/x/vulndb at VULNDB_VERSION (default its
# newest), fetched through the module proxy; govulncheck reads such a
# directory with -db file://DIR. It prints the version to stderr.
vulndb() {
	local json version dir
	json=$(cd "$TOOLS_CACHE" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "golang.org/x/vulndb@${VULNDB_VERSION:-latest}") || return
	version=$(sed -n 's/^[[:space:]]*"Version": "\(.*\)",$/\1/p' <<<"$json")
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$json")
	[ -d "$dir/data/osv" ] || { echo "release-tools: no data/osv in golang.org/x/vulndb@$version" >&2; return 1; }
	echo "release-tools: golang.org/x/vulndb@$version, $(ls "$dir/data/osv" | wc -l) entries" >&2
	echo "$dir/data/osv"
}

# release_toolchain prints the toolchain go.work names (its toolchain line):
# the toolchain of the release builds, whose standard library the
# vulnerability check judges.
release_toolchain() {
	local toolchain
	toolchain=$(sed -n 's/^toolchain \(go[^[:space:]]*\)$/\1/p' "$(git rev-parse --show-toplevel)/go.work")
	[ -n "$toolchain" ] || { echo "release-tools: go.work has no toolchain line" >&2; return 1; }
	echo "$toolchain"
}

# release_goroot prints the GOROOT of release_toolchain, which the go
# command fetches through the module proxy once.
release_goroot() {
	local toolchain
	toolchain=$(release_toolchain) || return
	(cd "$TOOLS_CACHE" && GOWORK=off GOTOOLCHAIN="$toolchain" go env GOROOT)
}
