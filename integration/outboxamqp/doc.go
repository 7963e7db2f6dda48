// Package outboxamqp runs the tests of package outbox/amqppub, the
// outbox's RabbitMQ publisher: the publisher suite (outbox/outboxtest)
// and the relays through a broker outage and a relay killed between
// publish and mark, over PostgreSQL and the shared RabbitMQ. They run from
// the integration module, so the amqppub module's go.mod stays free of
// pgstore, which the outbox's test helpers use. It holds tests only.
package outboxamqp
