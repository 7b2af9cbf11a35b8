# The README's test command is `make test`; .ci/run calls exactly that.
#
# make test   vet, then the race-enabled tests, against DynamoDB Local and a
#             Temporal dev server that scripts/harness.sh installs (cached in
#             $${XDG_CACHE_HOME:-$$HOME/.cache}/idemguard), starts on free
#             loopback ports and stops by PID.
# make unit   the same tests without starting servers (integration tests skip
#             unless CI=true).
# make bench  the micro-benchmarks.

GO ?= go

.PHONY: test unit vet bench tools fmt

# The library module and the examples module (joined by go.work).
PKGS = ./... ./examples/...

test: vet
	scripts/harness.sh run $(GO) test -race -count=1 $(PKGS)

unit: vet
	$(GO) test -race $(PKGS)

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./guard/

tools:
	scripts/harness.sh install

fmt:
	gofmt -w .
