#!/usr/bin/env bash
# redisstore beside its ceilings, in one run against the same Redis:
#   - the Go benchmarks of redisstore (bench_test.go): Claim+Complete and a
#     100-key ClaimBatch with the store and with a bare go-redis client
#     running two minimal scripts (SET NX claim, compare-and-SET complete),
#     Guard.Do, and MEMORY USAGE per record;
#   - redis-benchmark running those same two minimal scripts, the server's
#     limit for them without any Go client.
# It prints medians of COUNT runs (default 5) and the ratios.
#   scripts/bench-redis.sh [count]
# Redis: IDEM_REDIS_ADDR (default 127.0.0.1:6379). Keys are written under
# idemtest:/idembench: prefixes and expire within a minute.
set -euo pipefail
stats=$(cat "$(dirname "$0")/stats.awk") # median, pratio: see the file
cd "$(dirname "$0")/../redisstore"
count=${1:-5}
addr=${IDEM_REDIS_ADDR:-127.0.0.1:6379}
host=${addr%:*} port=${addr##*:}

# The minimal scripts; keep them as in bench_test.go.
CLAIM_LUA="if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0"
COMPLETE_LUA="if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 0"

go_out=$(mktemp) rb_out=$(mktemp)
trap 'rm -f "$go_out" "$go_out.test" "$rb_out"' EXIT

echo "== go test -bench (count $count)" >&2
# One run after the other rather than -count, so that store and bare sit
# seconds apart in every run and load that comes and goes weighs on both
# sides of a ratio alike.
go test -c -o "$go_out.test" .
for i in $(seq "$count"); do
	"$go_out.test" -test.run '^$' -test.bench '^(BenchmarkClaimComplete|BenchmarkClaimBatch100|BenchmarkGuardDo|BenchmarkMemoryPerRecord)$' \
		-test.benchtime 2s | tee -a "$go_out" >&2
done

echo "== redis-benchmark" >&2
rcli() { redis-cli -h "$host" -p "$port" "$@"; }
rb() { # rb NAME redis-benchmark-args…: appends "NAME requests/s" to $rb_out
	local name=$1
	shift
	local rps
	rps=$(redis-benchmark -h "$host" -p "$port" --csv "$@" 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
	echo "$name $rps" | tee -a "$rb_out" >&2
}
claim_sha=$(rcli SCRIPT LOAD "$CLAIM_LUA")
complete_sha=$(rcli SCRIPT LOAD "$COMPLETE_LUA")
keys=100000
for run in $(seq "$count"); do
	for c in 1 16 64; do
		p="idembench:$RANDOM$RANDOM:"
		# Claims of new keys: a keyspace far larger than the requests.
		rb "claim/c=$c" -c "$c" -n 100000 -r 100000000 EVALSHA "$claim_sha" 1 "${p}__rand_int__" tok 30000
		# Completes of claimed keys: $keys keys hold the token, and the
		# complete writes the token back, so every request takes the full
		# compare-and-SET path.
		rcli EVAL "for i = 0, tonumber(ARGV[2]) - 1 do redis.call('SET', ARGV[1] .. string.format('%012d', i), 'tok', 'PX', 60000) end" 0 "$p" "$keys" >/dev/null
		rb "complete/c=$c" -c "$c" -n 100000 -r "$keys" EVALSHA "$complete_sha" 1 "${p}__rand_int__" tok tok 30000
	done
	for c in 1 16; do
		rb "pipeline100/c=$c" -c "$c" -P 100 -n 400000 -r 100000000 EVALSHA "$claim_sha" 1 "idembench:$RANDOM$RANDOM:__rand_int__" tok 30000
	done
done

echo
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)  cores: $(nproc)  $(go version | cut -d' ' -f3)  $(rcli INFO server | grep -m1 redis_version | tr -d '\r')"
echo "medians of $count runs; keys/s = keys claimed and completed (or claimed, for batches) per second;"
echo "ratio = the median of the runs' own store/bare ratios (store and bare run seconds apart in each run)"
echo
awk "$stats"'
FNR == NR && /^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 2; i < NF; i++) {
		if ($(i + 1) == "keys/s") add(name, $i)
		if ($(i + 1) == "bytes/record") add("mem", $i)
		if ($(i + 1) == "bare-bytes/record") add("baremem", $i)
	}
	next
}
FNR != NR { add("rb/" $1, $2) }
END {
	printf "%-34s %12s %12s %8s %14s\n", "Claim+Complete, goroutines", "store keys/s", "bare keys/s", "ratio", "redis-bench"
	split("1 16 64", gs, " ")
	for (i = 1; i <= 3; i++) {
		g = gs[i]
		s = median("BenchmarkClaimComplete/store/goroutines=" g); b = median("BenchmarkClaimComplete/bare/goroutines=" g)
		cl = median("rb/claim/c=" g); co = median("rb/complete/c=" g)
		printf "%-34s %12.0f %12.0f %7.0f%% %14.0f\n", g, s, b, 100 * pratio("BenchmarkClaimComplete/store/goroutines=" g, "BenchmarkClaimComplete/bare/goroutines=" g), (cl > 0 && co > 0) ? 1 / (1 / cl + 1 / co) : 0
	}
	printf "\n%-34s %12s %12s %8s %14s\n", "ClaimBatch of 100, goroutines", "store keys/s", "bare keys/s", "ratio", "redis-bench"
	split("1 16", gs, " ")
	for (i = 1; i <= 2; i++) {
		g = gs[i]
		s = median("BenchmarkClaimBatch100/store/goroutines=" g); b = median("BenchmarkClaimBatch100/bare/goroutines=" g)
		printf "%-34s %12.0f %12.0f %7.0f%% %14.0f\n", g, s, b, 100 * pratio("BenchmarkClaimBatch100/store/goroutines=" g, "BenchmarkClaimBatch100/bare/goroutines=" g), median("rb/pipeline100/c=" g)
	}
	printf "\n%-34s %12s\n", "Guard.Do (Claim+Complete), goroutines", "keys/s"
	split("1 16 64", gs, " ")
	for (i = 1; i <= 3; i++) printf "%-34s %12.0f\n", gs[i], median("BenchmarkGuardDo/goroutines=" gs[i])
	printf "\nredis-benchmark (-c = goroutines): claim script %.0f/%.0f/%.0f req/s, complete script %.0f/%.0f/%.0f req/s at -c 1/16/64\n",
		median("rb/claim/c=1"), median("rb/claim/c=16"), median("rb/claim/c=64"),
		median("rb/complete/c=1"), median("rb/complete/c=16"), median("rb/complete/c=64")
	printf "MEMORY USAGE per completed record (16-byte result, 32-byte fingerprint): store %.0f bytes, bare scripts %.0f bytes\n",
		median("mem"), median("baremem")
}' "$go_out" "$rb_out"
