# make test: what CI runs (.ci/run). Every module of the workspace: gofmt,
# go vet, go test -race against the real servers, and the release check:
# every module, served from a module proxy built from this tree, fetched
# with `go get` and built outside the workspace, as users get it.

SHELL   := /bin/bash
MODULES := $(shell go list -m -f '{{.Dir}}')
# Integration tests fail, not skip, when a server is missing.
export IDEM_REQUIRE_SERVICES := 1

.PHONY: test services fmt vet stdlib-only deps unit release-check tidy bench

test: services fmt vet stdlib-only deps unit release-check

services:
	@scripts/services.sh

fmt:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	@set -e; for m in $(MODULES); do echo "go vet $$m"; (cd $$m && go vet ./...); done

# The root package imports the standard library only, and two packages of
# its module that import the standard library only themselves: the store
# contract (storage) and the consumers' split call (internal/ahead). The
# list is transitive: anything they imported would show here.
stdlib-only:
	@deps=$$(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' . | grep -v '^github.com/idemgo/idem\(/storage\|/internal/ahead\)\?$$'); \
	if [ -n "$$deps" ]; then echo "package idem imports non-standard packages:"; echo "$$deps"; exit 1; fi

# A library's go.mod requires only what its packages import: a test that
# needs another store or broker lives in the integration module. The
# key-value stores import no package of the core but storage.
deps:
	@go run ./internal/release deps

unit:
	@set -e; for m in $(MODULES); do (cd $$m && go test -race -count=1 -timeout 8m ./...); done

# No replace in any go.mod, one version across the modules, and each
# module compiles the same dependency versions alone as in the workspace.
release-check:
	@go run ./internal/release check

# go mod tidy for every module. The modules require each other at the
# version being released, which is not published yet: a plain go mod tidy
# outside the workspace cannot fetch it, this serves it from the tree.
tidy:
	@go run ./internal/release tidy

# make bench: each store beside a bare client of its server doing the least
# the same work needs, in interleaved rounds (idem-bench store), on the
# servers of the tests' variables. scripts/bench-*-instructions.sh count
# the servers' instructions instead, under callgrind.
BENCH_REDIS := redis://$(or $(IDEM_REDIS_ADDR),127.0.0.1:6379)/0
BENCH_PG    := $(or $(IDEM_POSTGRES_URL),postgres://postgres@127.0.0.1:5432/test?sslmode=disable)
bench:
	@set -e; for s in mem:// '$(BENCH_REDIS)' '$(BENCH_PG)'; do go run ./cmd/idem-bench store --store "$$s"; done

# make charts: BENCHMARKS.md's charts (docs/bench/*.svg), drawn from the rows
# of docs/bench/results.json, each copied from the BENCHMARKS.md section it
# names. go test ./cmd/idem-bench fails when a chart, or the summary table
# (-table prints it), is not what the rows make.
.PHONY: charts
charts:
	go run ./cmd/idem-bench chart -in docs/bench/results.json -out docs/bench

# make faults: the fault suite (integration/faults, FAULTS.md). Consumer
# processes killed with SIGKILL at every point of a message's handling,
# Redis crashed and restarted, the consumers' PostgreSQL backends
# terminated and their broker connections cut, on every broker (Kafka: a
# 3-node Apache Kafka cluster the harness starts for each run with
# scripts/kafka.sh, whose partition leaders it SIGKILLs and restarts) and
# store; then replicated stores of the harness's own failed over (a Redis
# primary with replicas and Sentinels, a PostgreSQL primary with a
# streaming standby, each SIGKILLed) and lease holders cut off from their
# store (about 2.5 minutes of the whole); under 15 minutes. Its short
# profile, with Kafka's kafkapg run only, is integration/faults's
# TestShortProfile, and one Redis and one PostgreSQL failover are
# TestFailoverShortProfile (about 15s), which the unit step of make test
# runs with the rest of the integration module. FAULTS_MD=file also
# writes the table of runs.
.PHONY: faults
#
# The Cassandra rows: cassandrastore's TestNodeCrash SIGKILLs a node of
# its own (port 9142) under eight Guards and restarts it, once with the
# commit log synced per group of writes (no acknowledged outcome may be
# lost) and once with Cassandra's default periodic sync (what it loses is
# reported, FAULTS.md).
faults: services
	cd integration && go run ./faults -profile full $(if $(FAULTS_MD),-md $(abspath $(FAULTS_MD)))
	cd cassandrastore && for sync in group periodic; do \
		IDEM_CASSANDRA_CRASH=1 IDEM_CASSANDRA_CRASH_SYNC=$$sync go test -count=1 -timeout 15m -run '^TestNodeCrash$$' -v . | grep -E '^(---|ok|FAIL|PASS)|commit log|lost'; \
		test $${PIPESTATUS[0]} -eq 0 || exit 1; done
