#!/usr/bin/env bash
# idemamqp beside a bare amqp091 consumer, in one run against the same
# RabbitMQ: BenchmarkConsume (integration/amqpstores/bench_test.go) drains a
# classic queue filled beforehand, with a handler that does nothing and one
# that sleeps 1ms, first with a bare consumer (same prefetch and handler
# goroutines, an ack per message), then with idemamqp over memstore, Redis
# and PostgreSQL (each also wrapped in idem.Coalesce); and, as the stores'
# own ceiling, Guard.Do alone over the same stores on as many goroutines,
# without a broker. Each run
# does all of them one after the other, so that load that comes and goes
# weighs on both sides of a ratio alike.
#   scripts/bench-amqp.sh [count] [messages]
# It prints medians of COUNT runs (default 5) of MESSAGES messages each
# (default 10000) and the median of the runs' own ratios to bare.
# Servers: IDEM_AMQP_URL, IDEM_REDIS_ADDR, IDEM_POSTGRES_URL; prefetch and
# handler goroutines: IDEM_BENCH_PREFETCH (64), IDEM_BENCH_CONCURRENCY (32).
set -euo pipefail
stats=$(cat "$(dirname "$0")/stats.awk") # median, pratio: see the file
cd "$(dirname "$0")/../integration/amqpstores"
count=${1:-5}
messages=${2:-10000}

out=$(mktemp)
trap 'rm -f "$out" "$out.test"' EXIT
go test -c -o "$out.test" .
for i in $(seq "$count"); do
	echo "== run $i of $count" >&2
	"$out.test" -test.run '^$' -test.bench '^BenchmarkConsume$' -test.benchtime "${messages}x" | tee -a "$out" >&2
done

echo
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)  cores: $(nproc)  $(go version | cut -d' ' -f3)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "medians of $count runs of $messages messages; prefetch ${IDEM_BENCH_PREFETCH:-64}, ${IDEM_BENCH_CONCURRENCY:-32} handler goroutines;"
echo "ratio = the median of the runs' own idemamqp/bare ratios"
echo
awk "$stats"'
/^BenchmarkConsume/ {
	name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkConsume\//, "", name)
	for (i = 2; i < NF; i++) {
		if ($(i + 1) == "msgs/s") add(name, $i)
		if ($(i + 1) ~ /µs\/msg$/) add(name " " $(i + 1), $i)
	}
}
END {
	printf "%-8s %-18s %12s %12s %7s %14s %8s   %s\n", "handler", "consumer", "msgs/s", "bare msgs/s", "÷ bare", "Guard.Do alone", "÷ alone", "CPU µs/msg: consumer rabbitmq redis postgres"
	split("noop 1ms", hs, " ")
	split("bare-redis memstore redis redis-coalesced postgres postgres-coalesced", ss, " ")
	split("cpu beam.smp redis-server postgres", cs, " ")
	for (i = 1; i <= 2; i++) {
		h = "handler=" hs[i]
		printf "%-8s %-18s %12.0f %12s %7s %14s %8s  ", hs[i], "bare", median(h "/bare"), "", "", "", ""
		for (c = 1; c <= 4; c++) printf " %6.1f", median(h "/bare " cs[c] "-µs/msg")
		printf "\n"
		for (j = 1; j <= 6; j++) {
			k = h "/" ss[j]
			if (n[k] == 0) continue
			printf "%-8s %-18s %12.0f %12.0f %6.0f%%", hs[i], ss[j], median(k), median(h "/bare"), 100 * pratio(k, h "/bare")
			if (n[k "-guard"] > 0) printf " %14.0f %7.0f%%  ", median(k "-guard"), 100 * pratio(k, k "-guard")
			else printf " %14s %8s  ", "", ""
			for (c = 1; c <= 4; c++) printf " %6.1f", median(k " " cs[c] "-µs/msg")
			if (ss[j] ~ /^redis/) printf "   %.0f%% of bare-redis", 100 * pratio(k, h "/bare-redis")
			printf "\n"
		}
	}
	print ""
	print "bare-redis: bare with the handler between a SET NX PX of the key and a SET PX of its outcome, a round trip each"
}' "$out"
