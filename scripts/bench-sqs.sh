#!/usr/bin/env bash
# idemsqs beside a bare SQS consumer, in one run against the same
# SQS-compatible server: BenchmarkConsume (integration/sqsstores/bench_test.go)
# drains a standard queue filled beforehand, with a handler that does
# nothing, first with a bare receive-and-delete loop (ReceiveMessage of 10,
# the handlers on goroutines, one DeleteMessageBatch), then that loop with a
# bare Redis dedupe (SET NX PX, SET PX), then idemsqs over Redis. Each run
# does the three one after the other, so that load that comes and goes
# weighs on both sides of a ratio alike.
#   scripts/bench-sqs.sh [count] [messages]
# It prints medians of COUNT runs (default 3) of MESSAGES messages each
# (default 500) and the median of the runs' own ratios.
# Servers: IDEM_SQS_URL (moto, by default), IDEM_REDIS_ADDR.
set -euo pipefail
stats=$(cat "$(dirname "$0")/stats.awk") # median, pratio: see the file
cd "$(dirname "$0")/../integration/sqsstores"
count=${1:-3}
messages=${2:-500}

out=$(mktemp)
trap 'rm -f "$out" "$out.test"' EXIT
go test -c -o "$out.test" .
for i in $(seq "$count"); do
	echo "== run $i of $count" >&2
	"$out.test" -test.run '^$' -test.bench '^BenchmarkConsume$' -test.benchtime "${messages}x" | tee -a "$out" >&2
done

echo
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)  cores: $(nproc)  $(go version | cut -d' ' -f3)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "medians of $count runs of $messages messages, 16 handlers at once; ratio = the median of the runs' own ratios"
echo
awk "$stats"'
/^BenchmarkConsume/ {
	name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkConsume\//, "", name)
	for (i = 2; i < NF; i++) if ($(i + 1) == "msgs/s") add(name, $i)
}
END {
	printf "%-12s %10s %8s %14s\n", "consumer", "msgs/s", "÷ bare", "÷ bare-redis"
	printf "%-12s %10.1f\n", "bare", median("bare")
	printf "%-12s %10.1f %7.0f%%\n", "bare-redis", median("bare-redis"), 100 * pratio("bare-redis", "bare")
	printf "%-12s %10.1f %7.0f%% %13.0f%%\n", "idemsqs", median("redis"), 100 * pratio("redis", "bare"), 100 * pratio("redis", "bare-redis")
}' "$out"
