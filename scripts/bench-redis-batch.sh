#!/usr/bin/env bash
# What a batch of new keys costs the Redis server per key, counted rather
# than timed: a private redis-server on a loopback port runs under
# callgrind, and redisstore's BenchmarkBatch500 drives it, each side
# (store: ClaimBatch + CompleteBatch; fenced: the least a fenced dedupe
# sends, redisstoretest.FencedDedupe; record: the same keeping a record of
# the store's size, NewRecordDedupe; pipeline: a SET NX pipeline and a SET
# pipeline, blind) for N1 and then N2 batches of 500 keys. The difference
# of the server's instructions over (N2 - N1) * 500 keys is the cost of
# one key, whatever the set-up costs (connections, SCRIPT LOAD).
#   scripts/bench-redis-batch.sh      (IDEM_CALLGRIND_OPS="N1 N2", default "10 90")
# Needs valgrind and redis-server; the shared Redis is not touched.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r n1 n2 <<<"${IDEM_CALLGRIND_OPS:-10 90}"
port=${IDEM_CALLGRIND_PORT:-6392}
dir=$(mktemp -d)
callgrind_pid=
trap '[ -n "$callgrind_pid" ] && kill "$callgrind_pid" 2>/dev/null; rm -rf "$dir"' EXIT
. scripts/callgrind-redis.sh

(cd redisstore && go test -c -o "$dir/redisstore.test" .)
callgrind_redis_start "$port" "$dir"

count() { # count SIDE BATCHES: the server's instructions while the benchmark runs BATCHES batches of SIDE
	redis-cli -p "$port" flushall >/dev/null
	IDEM_REDIS_ADDR=127.0.0.1:$port callgrind_redis_count "$dir" "$dir/redisstore.test" -test.run '^$' \
		-test.bench "^BenchmarkBatch500/$1\$" -test.benchtime "${2}x"
}
per() { # per SIDE: instructions per key
	local a b
	a=$(count "$1" "$n1")
	b=$(count "$1" "$n2")
	echo $(((b - a) / ((n2 - n1) * 500)))
}
store=$(per store)
fenced=$(per fenced)
record=$(per record)
pipeline=$(per pipeline)
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  redis-server $(redis-server --version | cut -d' ' -f3 | cut -d= -f2)  batches of 500: $n2 - $n1 per side"
echo "Redis server instructions per new key, ClaimBatch + CompleteBatch, 16 goroutines:"
awk -v s="$store" -v f="$fenced" -v r="$record" -v p="$pipeline" 'BEGIN {
	printf "  store %d   fenced limit %d   record limit %d   blind pipelines %d\n", s, f, r, p
	printf "  store / pipelines %.2f   fenced limit / pipelines %.2f   record limit / pipelines %.2f\n", s / p, f / p, r / p
	printf "  store / fenced limit %.2f   store / record limit %.2f\n", s / f, s / r
}'
