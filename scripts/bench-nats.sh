#!/usr/bin/env bash
# idemnats beside a bare JetStream pull consumer, in one run against the same
# NATS server: BenchmarkConsume (integration/natsstores/bench_test.go) publishes b.N
# messages to a fresh stream and consumes them with
#   - bare: Fetch batches of 64 and Ack each message after its handler;
#   - bare plus a dedupe through Redis written by hand: bare-redis, blind (a
#     pipeline of SET NX PX per batch, one of SET PX); bare-redis-fenced,
#     the least a fenced one does on Redis 7.0 (a pipeline of SET NX PX with
#     a token per key, then scripts that SET each outcome only while its key
#     holds its token); bare-redis-each, per message (a SET NX PX round trip,
#     then a SET PX one);
#   - idemnats over memstore, Redis and PostgreSQL, with the same batch;
# each with a no-op handler and a 1ms handler (a sleep).
# It prints medians of COUNT runs (default 5) and, per row, the median of the
# runs' own ratios to bare; for idem=redis also to each of the three Redis
# dedupes written by hand, and for bare-redis-fenced and bare-redis-each to
# bare-redis.
#   scripts/bench-nats.sh [count]
# Servers: IDEM_NATS_URL (default nats://127.0.0.1:4222), IDEM_REDIS_ADDR,
# IDEM_POSTGRES_URL. Streams, keys and schemas are the run's own and are
# deleted at its end.
set -euo pipefail
stats=$(cat "$(dirname "$0")/stats.awk") # median, pratio: see the file
cd "$(dirname "$0")/../integration/natsstores"
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
echo "medians of $count runs, messages/s; ratio = the median of the runs' own ratios"
echo
awk "$stats"'
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	cpu = 0
	for (i = 2; i < NF; i++) {
		if ($(i + 1) == "msgs/s") add(name, $i)
		if ($(i + 1) ~ /-µs\/msg$/) cpu += $i
	}
	add("cpu " name, cpu)
}
END {
	# Spelled out: some awks pad by bytes, and ÷ and µ take two.
	print "handler    consumer                msgs/s  bare msgs/s   ÷ bare   ÷ bare-redis   ÷ fenced   ÷ each CPU µs/msg"
	split("noop 1ms", hs, " ")
	split("bare-redis bare-redis-fenced bare-redis-each idem=memstore idem=redis idem=postgres", ss, " ")
	for (h = 1; h <= 2; h++) {
		pre = "BenchmarkConsume/handler=" hs[h] "/"
		bare = pre "bare"
		printf "%-10s %-17s %12.0f %12s %8s %14s %10s %8s %10.1f\n", hs[h], "bare", median(bare), "", "", "", "", "", median("cpu " bare)
		for (s = 1; s <= 6; s++) {
			k = pre ss[s]
			vs = vf = ve = ""
			if (ss[s] == "idem=redis" || ss[s] == "bare-redis-fenced" || ss[s] == "bare-redis-each")
				vs = sprintf("%13.0f%%", 100 * pratio(k, pre "bare-redis"))
			if (ss[s] == "idem=redis") {
				vf = sprintf("%9.0f%%", 100 * pratio(k, pre "bare-redis-fenced"))
				ve = sprintf("%7.0f%%", 100 * pratio(k, pre "bare-redis-each"))
			}
			c = ss[s]; sub(/^idem=/, "", c)
			printf "%-10s %-17s %12.0f %12.0f %7.0f%% %14s %10s %8s %10.1f\n", hs[h], c, median(k), median(bare), 100 * pratio(k, bare), vs, vf, ve, median("cpu " k)
		}
	}
	print ""
	print "bare-redis: bare plus one SET NX PX pipeline per batch before the handlers and one SET PX pipeline after"
	print "bare-redis-fenced: bare plus one SET NX PX pipeline per batch, a token per key, before the handlers, and after"
	print "  them one pipeline of scripts (one per 128 keys) that MGET the keys and SET PX each that still holds its token"
	print "bare-redis-each: bare plus, per message, a SET NX PX round trip before its handler and a SET PX round trip after"
	print "÷ fenced, ÷ each: idem=redis ÷ bare-redis-fenced, ÷ bare-redis-each"
	print "CPU: the consumer process + nats-server + redis-server + postgres, per message (servers shared)"
}' "$out"
