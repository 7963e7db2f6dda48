// Package kafkabench holds what of idemkafka and kafkapg needs more than
// their own modules' dependencies: the benchmarks beside their limits,
// measured in the same run on the Apache Kafka of IDEM_KAFKA_BROKERS, and
// the test of idemkafka's batch path on Redis and PostgreSQL, with the
// servers of IDEM_REDIS_ADDR and IDEM_POSTGRES_URL. It is a module of its own, not
// published, so that neither idemkafka nor kafkapg requires go-redis for
// their sake. Run the benchmarks with scripts/bench-kafka.sh; BENCHMARKS.md
// has the figures.
package kafkabench
