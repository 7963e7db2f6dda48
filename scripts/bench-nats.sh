#!/usr/bin/env bash
# idemnats beside a bare JetStream pull consumer, in one run against the same
# NATS server: BenchmarkConsume (idemnats/bench_test.go) publishes b.N
# messages to a fresh stream and consumes them with
#   - bare: Fetch batches of 64 and Ack each message after its handler;
#   - idemnats over memstore, Redis and PostgreSQL, with the same batch;
# each with a no-op handler and a 1ms handler (a sleep).
# It prints medians of COUNT runs (default 5) and, per row, the median of the
# runs' own idemnats/bare ratios.
#   scripts/bench-nats.sh [count]
# Servers: IDEM_NATS_URL (default nats://127.0.0.1:4222), IDEM_REDIS_ADDR,
# IDEM_POSTGRES_URL. Streams, keys and schemas are the run's own and are
# deleted at its end.
set -euo pipefail
stats=$(cat "$(dirname "$0")/stats.awk") # median, pratio: see the file
cd "$(dirname "$0")/../idemnats"
count=${1:-5}
out=$(mktemp)
trap 'rm -f "$out" "$out.test"' EXIT

go test -c -o "$out.test" .
# One run after the other rather than -count, so that bare and idemnats sit
# seconds apart in every run and load that comes and goes weighs on both
# sides of a ratio alike.
for i in $(seq "$count"); do
	echo "== run $i of $count" >&2
	"$out.test" -test.run '^$' -test.bench '^BenchmarkConsume$' -test.benchtime 2s | tee -a "$out" >&2
done

echo
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)  cores: $(nproc)  $(go version | cut -d' ' -f3)  $(nats-server --version 2>/dev/null || echo nats-server ?)"
echo "medians of $count runs, messages/s; ratio = the median of the runs' own idemnats/bare ratios"
echo
awk "$stats"'
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 2; i < NF; i++) if ($(i + 1) == "msgs/s") add(name, $i)
}
END {
	printf "%-10s %-10s %12s %12s %8s\n", "handler", "consumer", "msgs/s", "bare msgs/s", "ratio"
	split("noop 1ms", hs, " ")
	split("memstore redis postgres", ss, " ")
	for (h = 1; h <= 2; h++) {
		bare = "BenchmarkConsume/handler=" hs[h] "/bare"
		printf "%-10s %-10s %12.0f %12s %8s\n", hs[h], "bare", median(bare), "", ""
		for (s = 1; s <= 3; s++) {
			k = "BenchmarkConsume/handler=" hs[h] "/idem=" ss[s]
			printf "%-10s %-10s %12.0f %12.0f %7.0f%%\n", hs[h], ss[s], median(k), median(bare), 100 * pratio(k, bare)
		}
	}
}' "$out"
