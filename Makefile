# The README's test command is `make test`; .ci/run calls exactly that.
#
# make test   vet, then the race-enabled tests, against DynamoDB Local, a
#             Temporal dev server, redis-server and PostgreSQL that
#             scripts/harness.sh installs, and Lambda functions under the AWS
#             Lambda Runtime Interface Emulator (it, DynamoDB Local and the
#             Temporal CLI cached in
#             $${XDG_CACHE_HOME:-$$HOME/.cache}/idemguard, redis-server and
#             PostgreSQL from Debian's packages), starts on free loopback
#             ports and stops by PID.
# make unit   the same tests without starting servers (integration tests skip
#             unless CI=true).
# make bench  the micro-benchmarks of the guard and of the key canonicaliser
#             (internal/canonjson), then the load benchmark against
#             DynamoDB Local, PostgreSQL and redis-server (bench/load; see
#             docs/benchmarks.md); pass flags to it with BENCHFLAGS, e.g.
#             BENCHFLAGS='-ops 4000'.
# make fuzz   every fuzz target for $$(FUZZTIME) (default 60s) each.
# make dashboards  regenerates the Grafana dashboard and the Prometheus alert
#             rules (dashboards/idemguard.json, dashboards/alerts.yaml) from
#             telemetry/'s names; make test fails when they are stale.
# make dashboard-png  re-renders dashboards/dashboard.png, the README's
#             picture, from the same panels over a fresh run of the library
#             (docs/operations.md); about half a minute.
# make release-check  the release candidate as a user gets it
#             (scripts/release-check.sh, docs/releasing.md): a module proxy
#             of the released modules made from the working tree, the
#             README's install lines run in an empty module cache outside
#             the repository, the CLI and a consumer module built and run
#             from it, goreleaser check, then make vulncheck. VERSION
#             defaults to the version the nested modules require. Part of
#             make test.
# make api   writes the exported API of the released modules into
#             api/current.txt (one line per exported feature; see
#             docs/releasing.md); commit it with the change, whose review
#             it is. make api-check, part of make release-check and so of
#             make test, fails on any difference between the code and it.
# make vulncheck  govulncheck over every module, against the Go
#             vulnerability database fetched as a Go module
#             (scripts/vulncheck.sh).
# make release VERSION=v0.x.y  prepares a release: every module requires
#             VERSION of the released modules, the CHANGELOG's Unreleased
#             section becomes VERSION's, headed by the API's incompatible
#             changes since the previous release (apidiff), api/VERSION.txt
#             keeps the release's API, and the tags to push are printed.
# make tidy   go mod tidy in every module (tools/release tidy: the nested
#             modules require a version the module proxy may not serve yet).
# make cli-scale  loads 100,000 records into DynamoDB Local and lists them
#             with the idemguard CLI, reporting time and peak RSS
#             (docs/cli.md); about a minute and a half, so not in make test.

GO ?= go

.PHONY: test unit vet bench tools fmt cli-scale dashboards dashboard-png release release-check vulncheck tidy api api-check

# The library module and the nested examples, bench, chaos, CLI, dashboards,
# release tools, Watermill and Lambda modules (go.work).
PKGS = ./... ./examples/... ./bench/... ./chaos/... ./cmd/idemguard/... ./dashboards/... ./watermillguard/... ./lambdaguard/... ./tools/... ./tools/consumer/...

test: vet
	scripts/harness.sh run $(GO) test -race -count=1 $(PKGS)
	$(MAKE) --no-print-directory fuzz FUZZTIME=20000x FUZZTARGETS='./guard:FuzzDeriveKey ./guard:FuzzDeriveKeyGoValues $(CANONFUZZ)'
	$(MAKE) --no-print-directory release-check

unit: vet
	$(GO) test -race $(PKGS)

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./guard/ ./internal/canonjson/
	IDEMGUARD_SERVICES="dynamodb postgres redis" scripts/harness.sh run $(GO) run ./bench/load $(BENCHFLAGS)

# One run per fuzz target (PKG:Name), FUZZTIME each. `go test -fuzz` passes
# silently when its pattern matches nothing, so each target is first checked
# to exist. make test runs the key-derivation and canonicaliser targets for
# 20,000 inputs each (a few seconds): a count, not a duration, because Go 1.26's
# fuzzing coordinator can fail a duration run at its deadline with a bare
# "context deadline exceeded" and no failing input (golang/go#75804, fixed in
# Go 1.27). A long `make fuzz` can show the same; only a written failing input
# is a finding.
.PHONY: fuzz
FUZZTIME ?= 60s
# The key canonicaliser's differential fuzzers, in make test too.
CANONFUZZ = ./internal/canonjson:FuzzAppendText ./internal/canonjson:FuzzAppendMatchesJCS ./internal/canonjson:FuzzNumber
FUZZTARGETS ?= ./guard:FuzzDeriveKey ./guard:FuzzDeriveKeyGoValues ./guard:FuzzDeriveMatchesReference \
	./store/dynamodb:FuzzDecodeItem $(CANONFUZZ)
fuzz:
	@set -e; for t in $(FUZZTARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; \
		$(GO) test -list "^$$name$$" $$pkg | grep -qx "$$name" || { echo "fuzz: $$name not found in $$pkg"; exit 1; }; \
		echo "fuzz: $$name in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg; \
	done

dashboards:
	$(GO) generate ./dashboards/...

dashboard-png:
	$(GO) run ./dashboards/cmd/render -out dashboards/dashboard.png

# make failover  what a failover loses (docs/redis.md, docs/postgres.md):
#             a Redis replica and a PostgreSQL streaming standby of the
#             tests' own, fed through a link 50 ms late, promoted while
#             clients claim and complete keys; with and without WAIT
#             (WithReplicas) and synchronous replication. About 90 s.
.PHONY: failover
failover:
	IDEMGUARD_SERVICES="redis postgres" scripts/harness.sh run $(GO) test -count=1 -v -run '^(TestFailover|TestStandbyFailover)$$' ./store/redis/ ./store/postgres/ -failover

cli-scale:
	IDEMGUARD_SERVICES=dynamodb scripts/harness.sh run $(GO) test -count=1 -run '^TestListScale$$' -v ./cmd/idemguard/ -list-records 100000

tools:
	scripts/harness.sh install

fmt:
	gofmt -w .

# make chaos  the chaos suite (chaos/, docs/chaos.md): worker processes
#             SIGKILLed, restarted and paused in the window after a side
#             effect, 5% store faults, 12,100 guarded operations against the
#             harness's servers; prints the figures and a JSON line, fails on
#             a duplicate effect, a stuck record, or an extra run or lost
#             lease that no kill, pause or fault of its own process explains.
#             Pass flags with CHAOSFLAGS, e.g. CHAOSFLAGS='-workflows 200',
#             or CHAOSFLAGS='-store postgres' / '-store redis' /
#             '-store dynamodb-tx' for the other stores and DynamoDB's
#             transactions, or CHAOSFLAGS='-control' for the control run (no
#             kills, pauses or faults: nothing may run twice, no lease may be
#             lost). Then the long linearizability run (chaos/cmd/linz):
#             every store's histories through its fault proxy, checked with
#             Porcupine; flags in LINZFLAGS, e.g. LINZFLAGS='-rounds 20'.
.PHONY: chaos
chaos:
	scripts/harness.sh run $(GO) run ./chaos/cmd/chaos $(CHAOSFLAGS)
	IDEMGUARD_SERVICES="dynamodb redis postgres" scripts/harness.sh run $(GO) run ./chaos/cmd/linz $(LINZFLAGS)

# The release (docs/releasing.md). release-check runs the checks a release
# must pass: the install from outside first (it names a wrong requirement
# before anything else trips over it), then the others: the exported API
# against api/current.txt, the vulnerabilities. Add new ones (the stored
# records of earlier releases) as lines of its recipe.
VERSION ?=

release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=v0.x.y"; exit 1; }
	cd tools && GOWORK=off $(GO) run ./release prepare $(VERSION)

release-check:
	scripts/release-check.sh $(VERSION)
	$(MAKE) --no-print-directory api-check
	scripts/vulncheck.sh

api:
	cd tools && GOWORK=off $(GO) run ./release api

api-check:
	cd tools && GOWORK=off $(GO) run ./release api check

vulncheck:
	scripts/vulncheck.sh

tidy:
	cd tools && GOWORK=off $(GO) run ./release tidy
