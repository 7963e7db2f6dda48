// Command idem-bench measures what idem costs, beside what the same work
// costs without it.
//
//	idem-bench <benchmark> [flags]
//
// Benchmarks:
//
//	http   an HTTP handler driven by concurrent clients, bare and behind
//	       idemhttp over each store: throughput and latency
//	store  a store's operations beside a bare client of its server, in
//	       interleaved rounds: the ratios BENCHMARKS.md reports
//
// It is a tool of its own, apart from the operator's command idem, so
// that the load generator (vegeta) is not linked into the binary an
// operator installs. Stores are named by URL as storeurl.Open reads them.
// Run "idem-bench -h" for the list and "idem-bench <benchmark> -h" for a
// benchmark's flags. The exit status is 0 on success, 1 when the
// benchmark failed and 2 on a usage error.
//
//	go install github.com/idemgo/idem/cmd/idem-bench   # once v0.1.0 is tagged; until then, go run ./cmd/idem-bench in a clone
//
// # idem-bench http
//
// What idempotency costs a request. A POST handler that sleeps --sleep
// (50ms, standing for the real work) and answers a small JSON body is
// served on a loopback port and driven by --clients (50) concurrent clients
// in a closed loop, with vegeta, for --duration (10s) per row: bare first,
// the baseline, then behind [idemhttp] over each store of --stores (by
// default memstore, the Redis at IDEM_REDIS_ADDR and the PostgreSQL at
// IDEM_POSTGRES_URL), each row in a fresh namespace. Each row's load is
// split into --rounds (5) rounds, and every round runs each row once, in
// turn, so that a machine whose speed drifts weighs on every row alike.
// Every row runs twice:
// the fresh pass sends a new Idempotency-Key with each request, the repeat
// pass resends with --repeat (30%) of its requests the key of a request
// already answered, which the middleware replays without running the
// handler. The table gives each row's requests, 2xx responses per second,
// mean, p50, p95 and p99 latency, errors, repeats and replays, and its
// throughput and p99 against the baseline of the same pass; --json adds the
// same as JSON. A store that cannot be reached fails the command before any
// load runs, and a row with errors (responses other than 2xx) fails it once
// the table is printed.
//
//	go run ./cmd/idem-bench http --duration 10s
//
// # idem-bench store
//
// What a store costs beside the least a client of its server must do for
// the same work, with the same client library, connections and goroutines:
// its bare side (sync.Map for memstore; a SET NX PX script and a
// compare-and-SET script for Redis; INSERT … ON CONFLICT DO NOTHING and the
// fenced UPDATE for PostgreSQL, and so on for each case). The cases are
// Claim+Complete, ClaimBatch of 100, Guard.Do of a new key, Guard.Do of a
// duplicate and, for PostgreSQL, TxGuard.Do. Each of --rounds (5) rounds
// runs every case with each of --goroutines (1,16,64), its store side and
// its bare side one right after the other, for --duration (1s) each, so
// that a machine whose speed drifts weighs on both sides of a round alike.
// The table gives the medians of the rounds' keys per second and
// allocations per operation, and the median of the rounds' own store ÷
// bare ratios, then each round's; --json adds every round's figures. With
// --ops, each side runs an exact number of operations instead: the
// callgrind scripts of scripts/ count a server's instructions that way.
//
//	go run ./cmd/idem-bench store --store redis://127.0.0.1:6379/0
package main
