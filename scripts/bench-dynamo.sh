#!/usr/bin/env bash
# dynamostore beside the bare AWS SDK, in one run against the same dynalite:
# Claim+Complete of new keys and the replay of completed ones, each through
# the store and through the SDK doing the least a DynamoDB idempotency check
# can do (bench_test.go: a PutItem conditioned on the key being absent, an
# UpdateItem of the result conditioned on the token; a replay is that
# PutItem failing and a consistent GetItem), "bare" with an item of key and
# token, "powertools" with the item and conditions of AWS Lambda
# Powertools' idempotency utility, "item" with the store's whole item. Store and bare alternate
# within every run; the script prints the medians of COUNT runs
# (default 5) and the median of the runs' own ratios, with the server's CPU
# time per key (read from /proc) beside the rates, which the machine's
# other load moves less.
#   scripts/bench-dynamo.sh [count]
# Server: IDEM_DYNAMODB_URL (default http://127.0.0.1:8000); every
# benchmark works in a table of its own, deleted at its end.
set -euo pipefail
stats=$(cat "$(dirname "$0")/stats.awk") # median, pratio: see the file
cd "$(dirname "$0")/../dynamostore"
count=${1:-5}
url=${IDEM_DYNAMODB_URL:-http://127.0.0.1:8000}
port=${url##*:}
port=${port%%/*}
pid=$(ss -Hltnp "sport = :$port" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true)
[ -n "$pid" ] || echo "bench-dynamo: no process found listening on port $port: no server CPU figures" >&2

go_out=$(mktemp)
trap 'rm -f "$go_out" "$go_out.test"' EXIT
go test -c -o "$go_out.test" .
for i in $(seq "$count"); do
	echo "== run $i of $count" >&2
	IDEM_DYNAMODB_PID=$pid "$go_out.test" -test.run '^$' -test.bench '^(BenchmarkClaimComplete|BenchmarkReplay)$' \
		-test.benchtime 1500x | tee -a "$go_out" >&2
done

echo
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)  cores: $(nproc)  $(go version | cut -d' ' -f3)  server: dynalite $(node -p "require('/opt/idem-dynalite/node_modules/dynalite/package.json').version" 2>/dev/null || echo '?')"
echo "medians of $count runs of 1500 keys; ratio = the median of the runs' own store/bare ratios"
echo
awk "$stats"'
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 2; i < NF; i++) {
		if ($(i + 1) == "keys/s") add(name, $i)
		if ($(i + 1) == "server-µs/key") add("server " name, $i)
		if ($(i + 1) == "client-µs/key") add("client " name, $i)
	}
}
END {
	printf "%-18s %31s %26s %35s %20s\n", "", "keys/s", "store ÷", "server CPU µs/key", "client CPU µs/key"
	printf "%-18s %7s %7s %7s %7s %8s %8s %8s %8s %8s %8s %8s %9s %9s\n", "case, goroutines", "store", "bare", "ptools", "item", "bare", "ptools", "item", "store", "bare", "ptools", "item", "store", "bare"
	split("ClaimComplete Replay", cases, " ")
	split("1 16", gs, " ")
	for (c = 1; c <= 2; c++) for (i = 1; i <= 2; i++) {
		p = "Benchmark" cases[c] "/"; g = "/goroutines=" gs[i]
		s = p "store" g; b = p "bare" g; pt = p "bare-powertools" g; it = p "bare-item" g
		printf "%-18s %7.0f %7.0f %7.0f %7.0f %7.0f%% %7.0f%% %7.0f%% %8.0f %8.0f %8.0f %8.0f %9.0f %9.0f\n", cases[c] ", " gs[i],
			median(s), median(b), median(pt), median(it), 100 * pratio(s, b), 100 * pratio(s, pt), 100 * pratio(s, it),
			median("server " s), median("server " b), median("server " pt), median("server " it), median("client " s), median("client " b)
	}
}' "$go_out"
