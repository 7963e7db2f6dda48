#!/usr/bin/env bash
# What a claim and its complete cost the Redis server, counted rather than
# timed: a private redis-server on a loopback port runs under callgrind,
# and `idem-bench store` drives it (the claim-complete case, 16 goroutines),
# with the store and then with the bare scripts, each side for N1 and then
# N2 keys. The difference of the server's instructions over N2 - N1 is the
# cost of one key, whatever the command's own set-up costs (connections,
# SCRIPT LOAD). Instructions per key do not move with the load of a shared
# machine the way keys/s do.
# IDEM_CALLGRIND_CASE picks the case of `idem-bench store --cases`:
# claim-complete (the default: a new key's claim and complete, what one
# Guard.Do of a new key costs the server) or do-duplicate (a replay).
#   scripts/bench-redis-instructions.sh      (IDEM_CALLGRIND_OPS="N1 N2", default "500 4500")
#   IDEM_CALLGRIND_CASE=do-duplicate scripts/bench-redis-instructions.sh
# Needs valgrind and redis-server; the shared Redis is not touched.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r n1 n2 <<<"${IDEM_CALLGRIND_OPS:-500 4500}"
port=${IDEM_CALLGRIND_PORT:-6391}
case=${IDEM_CALLGRIND_CASE:-claim-complete}
dir=$(mktemp -d)
callgrind_pid=
trap '[ -n "$callgrind_pid" ] && kill "$callgrind_pid" 2>/dev/null; rm -rf "$dir"' EXIT
. scripts/callgrind-redis.sh

go build -o "$dir/idem-bench" ./cmd/idem-bench
callgrind_redis_start "$port" "$dir"

count() { # count SIDE OPS: the server's instructions while the command runs OPS operations of SIDE
	callgrind_redis_count "$dir" "$dir/idem-bench" store --store "redis://127.0.0.1:$port/0" --cases "$case" --sides "$1" \
		--goroutines 16 --rounds 1 --ops "$2"
}
per() { # per SIDE: instructions per key
	local a b
	a=$(count "$1" "$n1")
	b=$(count "$1" "$n2")
	echo $(((b - a) / (n2 - n1)))
}
store=$(per store)
bare=$(per bare)
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  redis-server $(redis-server --version | cut -d' ' -f3 | cut -d= -f2)  keys: $n2 - $n1 per side"
printf "Redis server instructions per key (%s), 16 goroutines:\n" "$case"
awk -v s="$store" -v b="$bare" 'BEGIN { printf "  store %d   bare scripts %d   store/bare %.2f\n", s, b, s / b }'
