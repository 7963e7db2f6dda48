// Package outboxsqs runs the tests of package outbox/sqspub, the outbox's
// Amazon SQS publisher: the publisher suite (outbox/outboxtest) over
// PostgreSQL and the SQS-compatible server of the tests (moto, on
// IDEM_SQS_URL). They run from the integration module, so the sqspub
// module's go.mod stays free of pgstore, which the outbox's test helpers
// use. It holds tests only.
package outboxsqs
