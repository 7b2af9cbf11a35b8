#!/usr/bin/env bash
# release-check.sh [VERSION] — the release candidate, installed as a user
# outside the repository installs it (docs/releasing.md):
#
# 1. every module requires VERSION of the released modules (default: the
#    version they require, which must be one) and no released module has a
#    replace directive;
# 2. a file-system module proxy of the released modules at VERSION is made
#    from the working tree (tools/release proxy), zipped as the module proxy
#    zips a tag;
# 3. with an empty module cache, no workspace, and only that proxy in front
#    of the configured one, the README's install lines run as written:
#    `go install …/cmd/idemguard@latest` gives a binary that runs and was
#    built from those zips, and the `go get` lines fetch what a consumer
#    module made in a temporary directory needs to build; the consumer
#    (tools/consumer) runs a guarded call on the memory store twice and
#    checks that the second replays;
# 4. govulncheck over the consumer, as it resolves the released modules;
# 5. `goreleaser check` of .goreleaser.yaml.
#
# The README must state the minimum Go version, the go directive of go.mod.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/release-tools.sh
repo=$PWD
start=$SECONDS
log() { printf 'release-check: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

VERSION=${1:-$(release_tool version)}
release_tool check "$VERSION"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
release_tool proxy "$VERSION" "$work/proxy"

# What a user outside the repository has: no go.work, an empty module cache
# (writable, so that the trap can remove it), the module proxy. GONOSUMDB:
# the checksum database does not know the candidate's zips. -trimpath keeps
# the build cache's entries independent of the temporary paths, so a second
# run compiles nothing anew.
upstream=$(go env GOPROXY)
outside() {
	env GOWORK=off GOMODCACHE="$work/modcache" GOPATH="$work/gopath" GOBIN="$work/bin" \
		GOFLAGS="-modcacherw -trimpath" GOPROXY="file://$work/proxy,$upstream" \
		GONOSUMDB=github.com/idemguard/idemguard GOTOOLCHAIN=local "$@"
}

# The install lines of the README and of the docs that repeat them.
docs=(README.md docs/cli.md docs/consumers.md)
mapfile -t lines < <(grep -h -E '^go (install|get) github\.com/idemguard/idemguard' "${docs[@]}" |
	sed 's/[[:space:]]*#.*$//; s/[[:space:]]*$//' | sort -u)
grep -q -E '^go install github\.com/idemguard/idemguard/cmd/idemguard@' README.md || fail "README.md has no go install line for the CLI"
grep -q -E '^go get github\.com/idemguard/idemguard' README.md || fail "README.md has no go get line"
godirective=$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)
grep -q "Go $godirective or newer" README.md || fail "README.md does not state the minimum Go version: \"Go $godirective or newer\" (go.mod's go directive)"

# The CLI.
for line in "${lines[@]}"; do
	[[ $line == "go install "* ]] || continue
	log "$line"
	read -ra cmd <<<"$line"
	(cd "$work" && outside "${cmd[@]}") || fail "$line"
done
bin=$work/bin/idemguard
[ -x "$bin" ] || fail "go install left no $bin"
"$bin" --help >/dev/null || fail "idemguard --help"
echo '{"order": {"id": "o-1"}}' >"$work/order.json"
key=$("$bin" key --scope charge --key-path order.id "$work/order.json") || fail "idemguard key"
[[ $key == charge#* ]] || fail "idemguard key printed $key"
log "idemguard key: $key"

# Built from the candidate's zips: the build information records the same
# hashes as the proxy's.
buildinfo=$(go version -m "$bin")
while read -r mod version sum; do
	case $mod in github.com/idemguard/idemguard/watermillguard | github.com/idemguard/idemguard/lambdaguard) continue ;; esac # not in the CLI
	awk -v m="$mod" -v v="$version" -v s="$sum" '($1 == "mod" || $1 == "dep") && $2 == m && $3 == v && $4 == s { found = 1 } END { exit !found }' <<<"$buildinfo" ||
		fail "the binary was not built from $mod $version $sum:"$'\n'"$buildinfo"
done <"$work/proxy/sums.txt"

# A consumer module.
consumer=$work/consumer
mkdir -p "$consumer"
cp tools/consumer/main.go "$consumer/"  # without its go.mod: the README's lines make it
(cd "$consumer" && outside go mod init example.com/consumer) 2>/dev/null
for line in "${lines[@]}"; do
	[[ $line == "go get "* ]] || continue
	log "$line"
	read -ra cmd <<<"$line"
	(cd "$consumer" && outside "${cmd[@]}") || fail "$line"
done
# No -mod=mod: the build fails if the go get lines left something out.
(cd "$consumer" && outside go build -o consumer .) || fail "the consumer does not build with what the README's go get lines fetched"
while read -r mod version sum; do
	[ "$mod" = github.com/idemguard/idemguard/cmd/idemguard ] && continue # a command, not imported
	grep -q -x "$mod $version $sum" "$consumer/go.sum" || fail "the consumer's go.sum does not have $mod $version $sum"
done <"$work/proxy/sums.txt"
"$consumer/consumer" || fail "the consumer's guarded call"

# Known vulnerabilities, as a consumer resolves the released modules.
govulncheck=$(go_tool govulncheck golang.org/x/vuln/cmd/govulncheck "$GOVULNCHECK_VERSION")
db=$(vulndb)
goroot=$(release_goroot)
log "govulncheck in the consumer module ($("$goroot/bin/go" version | cut -d' ' -f3))"
(cd "$consumer" && outside env PATH="$goroot/bin:$PATH" "$govulncheck" -db "file://$db" ./...) ||
	fail "govulncheck in the consumer module"

# The CLI's release configuration (the cross builds are docs/releasing.md's).
goreleaser=$(go_tool goreleaser github.com/goreleaser/goreleaser/v2 "$GORELEASER_VERSION")
"$goreleaser" check || fail "goreleaser check"
toolchain=$(release_toolchain)
grep -q -E "^[[:space:]]*- GOTOOLCHAIN=$toolchain\$" .goreleaser.yaml ||
	fail ".goreleaser.yaml does not build with GOTOOLCHAIN=$toolchain, go.work's toolchain"

log "ok: $VERSION installs and works from outside the repository ($((SECONDS - start)) s)"
