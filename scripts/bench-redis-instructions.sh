#!/usr/bin/env bash
# What a claim and its complete cost the Redis server, counted rather than
# timed: a private redis-server on a loopback port runs under callgrind,
# and the redisstore benchmark BenchmarkClaimComplete (16 goroutines) drives
# it for N keys with the store, then with the bare scripts. Instructions
# per key do not move with the load of a shared machine the way keys/s do.
#   scripts/bench-redis-instructions.sh [keys]      (default 4000)
# Needs valgrind and redis-server; the shared Redis is not touched.
set -euo pipefail
cd "$(dirname "$0")/../redisstore"
n=${1:-4000}
port=${IDEM_CALLGRIND_PORT:-6391}
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT

go test -c -o "$dir/redisstore.test" .
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" \
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$dir/valgrind.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.2
done
redis-cli -p "$port" ping >/dev/null

count() { # count SIDE: instructions per key of the server for BenchmarkClaimComplete/SIDE
	local side=$1 bench="BenchmarkClaimComplete/$1/goroutines=16\$"
	# A first run loads the scripts and warms the server up.
	IDEM_REDIS_ADDR=127.0.0.1:$port "$dir/redisstore.test" -test.run '^$' -test.bench "$bench" -test.benchtime 100x >/dev/null
	callgrind_control -z "$pid" >/dev/null 2>&1
	IDEM_REDIS_ADDR=127.0.0.1:$port "$dir/redisstore.test" -test.run '^$' -test.bench "$bench" -test.benchtime "${n}x" >/dev/null
	rm -f "$dir"/cg."$pid".*
	callgrind_control -d "$pid" >/dev/null 2>&1
	# The benchmark runs b.N = 1 before b.N = n: n + 1 keys.
	awk -v n="$n" '/^(summary|totals):/ { print int($2 / (n + 1)); exit }' "$dir"/cg."$pid".*
}
store=$(count store)
bare=$(count bare)
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  redis-server $(redis-server --version | cut -d' ' -f3 | cut -d= -f2)  keys: $n per side"
printf "Redis server instructions per key (claim + complete), 16 goroutines:\n"
awk -v s="$store" -v b="$bare" 'BEGIN { printf "  store %d   bare scripts %d   store/bare %.2f\n", s, b, s / b }'
