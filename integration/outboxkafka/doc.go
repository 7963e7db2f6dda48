// Package outboxkafka runs the tests of package outbox/kafkapub, the
// outbox's Apache Kafka publisher: the publisher suite (outbox/outboxtest)
// and the relays through broker outages and a broker crash, over
// PostgreSQL, the shared Apache Kafka, a node of the test's own and kfake.
// They run from the integration module, so the kafkapub module's go.mod
// stays free of pgstore, which the outbox's test helpers use, and of
// kfake. It holds tests only.
package outboxkafka
