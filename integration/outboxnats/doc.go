// Package outboxnats runs the tests and the benchmark of package
// outbox/natspub, the outbox's NATS JetStream publisher: the publisher
// suite (outbox/outboxtest) and the relay through a broker restart, over
// PostgreSQL and the shared NATS server or one of the test's own. They run
// from the integration module, so the natspub module's go.mod stays free
// of pgstore, which the outbox's test helpers use. It holds tests only.
package outboxnats
