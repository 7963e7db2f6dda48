#!/usr/bin/env bash
# cassandrastore beside bare lightweight transactions, in one run against
# the same Cassandra node through the same session: Claim+Complete of new
# keys and the replay of completed ones, each through the store and as the
# least a Cassandra idempotency check can do (bench_test.go: INSERT of key
# and token IF NOT EXISTS, then UPDATE of the result IF the token; a replay
# is that INSERT failing, which returns the row), and as bare-record, the
# store's whole record with the bare conditions. Store and bare alternate
# within every run, 16 goroutines each; the script prints the medians of
# COUNT runs (default 7) and the median of the runs' own ratios.
#   scripts/bench-cassandra.sh [count]
# Node: IDEM_CASSANDRA_ADDR (default 127.0.0.1:9042); the runs work in a
# keyspace of their own, dropped at the end.
set -euo pipefail
stats=$(cat "$(dirname "$0")/stats.awk") # median, pratio: see the file
cd "$(dirname "$0")/../cassandrastore"
count=${1:-7}
go_out=$(mktemp)
trap 'rm -f "$go_out" "$go_out.test"' EXIT
go test -c -o "$go_out.test" .
for i in $(seq "$count"); do
	echo "== run $i of $count" >&2
	IDEM_REQUIRE_SERVICES=1 "$go_out.test" -test.run '^$' -test.bench '^(BenchmarkClaimComplete|BenchmarkClaimReplay)$' \
		-test.benchtime 1000x | tee -a "$go_out" >&2
done

echo
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)  cores: $(nproc)  $(go version | cut -d' ' -f3)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "medians of $count runs of 1000 keys, 16 goroutines; ratio = the median of the runs' own store/bare ratios"
echo
awk "$stats"'
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 2; i < NF; i++) if ($(i + 1) == "keys/s") add(name, $i)
}
END {
	printf "%-15s %8s %8s %12s %13s %20s\n", "case", "store", "bare", "bare-record", "store ÷ bare", "store ÷ bare-record"
	split("ClaimComplete ClaimReplay", cases, " ")
	for (c = 1; c <= 2; c++) {
		s = "Benchmark" cases[c] "/store"; b = "Benchmark" cases[c] "/bare-lwt"; r = "Benchmark" cases[c] "/bare-record"
		if (n[r]) printf "%-15s %8.0f %8.0f %12.0f %12.0f%% %19.0f%%\n", cases[c], median(s), median(b), median(r), 100 * pratio(s, b), 100 * pratio(s, r)
		else printf "%-15s %8.0f %8.0f %12s %12.0f%% %20s\n", cases[c], median(s), median(b), "", 100 * pratio(s, b), ""
	}
}' "$go_out"
