// Package kafkabench holds the benchmarks of idemkafka and kafkapg beside
// their limits, measured in the same run on an in-process Kafka cluster
// (kfake), with Redis and PostgreSQL from IDEM_REDIS_ADDR and
// IDEM_POSTGRES_URL. It is a module of its own so that neither idemkafka
// nor kafkapg requires the other stores' clients for their sake. Run it
// with scripts/bench-kafka.sh; BENCHMARKS.md has the figures.
package kafkabench
