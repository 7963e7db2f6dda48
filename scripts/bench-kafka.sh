#!/usr/bin/env bash
# idemkafka and kafkapg beside their limits, in one run: BenchmarkKafka of
# idemkafka/kafkabench consumes one topic of 16 partitions on the Apache
# Kafka of IDEM_KAFKA_BROKERS (default 127.0.0.1:9092, as
# scripts/services.sh starts it), a fifth of its records duplicates, once
# per case:
#   - a no-op handler: a bare franz-go group consumer; idemkafka over
#     memstore, Redis and PostgreSQL; and, beside each remote store, the
#     bare consumer plus the least that store's check writes per batch
#     (Redis: a pipeline of SET NX and one of SET; PostgreSQL: an
#     INSERT … ON CONFLICT DO NOTHING and an UPDATE over unnest), and the
#     bare consumer plus the store's own ClaimBatch and CompleteBatch;
#     for Redis also the bare consumer plus the least a fenced dedupe does
#     per batch on Redis 7.0 (redis-fenced: a pipeline of SET NX PX with a
#     token per key, then a pipeline of scripts that SET each outcome only
#     while its key holds its token), and plus a hand-rolled dedupe per
#     record (redis-each: a SET NX PX round trip, then a SET PX one);
#   - a handler that takes 1ms: the bare consumer and idemkafka over Redis;
#   - exactly-once into PostgreSQL: a bare consumer that writes the same
#     business rows and the offset in one transaction per batch, the same
#     with pgstore's ClaimBatch and CompleteBatch in its transaction, and
#     kafkapg per batch and per record.
# The cases run one after the other in each of COUNT runs (default 5), so
# that load that comes and goes weighs on both sides of a ratio alike. It
# prints the medians of records/s and, per case, the median of the runs'
# own ratios to the case it is measured against (idemkafka over Redis
# against each of the three Redis limits); and, for the no-op Redis cases,
# the Redis server's CPU time per record beside the blind limit's.
#   scripts/bench-kafka.sh [count] [records] [same|other]
# records: per run (default 200000). same (default): a duplicate lands on
# its original's partition, as a producer's retry does; other: on another
# partition, three records after it.
# Redis: IDEM_REDIS_ADDR; PostgreSQL: IDEM_POSTGRES_URL (a schema of the
# run's own, dropped at the end).
set -euo pipefail
stats=$(cat "$(dirname "$0")/stats.awk") # median, pratio: see the file
cd "$(dirname "$0")/../idemkafka/kafkabench"
count=${1:-5}
export IDEM_KAFKA_BENCH_RECORDS=${2:-200000}
export IDEM_KAFKA_BENCH_DUPLICATES=${3:-same}
out=$(mktemp)
trap 'rm -f "$out" "$out.test"' EXIT

go test -c -o "$out.test" .
for i in $(seq "$count"); do
	echo "== run $i of $count" >&2
	"$out.test" -test.run '^$' -test.bench '^BenchmarkKafka$' -test.benchtime 1x | tee -a "$out" >&2
done

echo
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)  cores: $(nproc)  $(go version | cut -d' ' -f3)"
echo "$IDEM_KAFKA_BENCH_RECORDS records, 16 partitions, duplicates: $IDEM_KAFKA_BENCH_DUPLICATES partition; medians of $count runs;"
echo "ratio = the median of the runs' own case/against ratios"
echo
awk "$stats"'
/^BenchmarkKafka\// {
	name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkKafka\//, "", name)
	for (i = 2; i < NF; i++) {
		if ($(i + 1) == "records/s") add(name, $i)
		if ($(i + 1) == "redis-cpu-us/record") add(name " cpu", $i)
	}
}
function cpu(c, against) {
	printf "%-18s %10.2f us   %-18s %10.2f us %7.0f%%\n", c, median(c " cpu"), against, median(against " cpu"), 100 * pratio(against " cpu", c " cpu")
}
function row(c, against, target) {
	if (against == "") { printf "%-18s %12.0f\n", c, median(c); return }
	printf "%-18s %12.0f   %-18s %12.0f %7.0f%%   %s\n", c, median(c), against, median(against), 100 * pratio(c, against), target
}
END {
	printf "%-18s %12s   %-18s %12s %8s   %s\n", "case", "records/s", "against", "records/s", "ratio", "target"
	row("noop/bare")
	row("noop/mem", "noop/bare", "")
	row("noop/redis-limit", "noop/bare", "")
	row("noop/redis-fenced", "noop/redis-limit", "")
	row("noop/redis-record", "noop/redis-limit", "")
	row("noop/redis-each", "noop/redis-limit", "")
	row("noop/redis-store", "noop/redis-limit", "")
	row("noop/redis", "noop/redis-limit", ">= 80%")
	row("noop/redis", "noop/redis-fenced", "")
	row("noop/redis", "noop/redis-record", "")
	row("noop/redis", "noop/redis-each", "")
	row("noop/redis", "noop/redis-store", "")
	row("noop/pg-limit", "noop/bare", "")
	row("noop/pg-store", "noop/pg-limit", "")
	row("noop/pg", "noop/pg-limit", "")
	row("noop/pg", "noop/pg-store", "")
	row("1ms/bare")
	row("1ms/redis", "1ms/bare", ">= 95%")
	row("tx/bare")
	row("tx/store", "tx/bare", "")
	row("tx/batch", "tx/bare", ">= 70%")
	row("tx/batch", "tx/store", "")
	row("tx/record", "tx/bare", "")
	print ""
	print "Redis server CPU per record (INFO cpu); ratio = the limit CPU / the case CPU"
	cpu("noop/redis-fenced", "noop/redis-limit")
	cpu("noop/redis-record", "noop/redis-limit")
	cpu("noop/redis-each", "noop/redis-limit")
	cpu("noop/redis-store", "noop/redis-limit")
	cpu("noop/redis", "noop/redis-limit")
	cpu("noop/redis-store", "noop/redis-record")
	cpu("noop/redis", "noop/redis-record")
}' "$out"
