// Package outboxtest holds what the tests of the outbox, of its publishers
// and of programs built on them share: a PostgreSQL schema per test with a
// migrated outbox table, an in-memory [Recorder] publisher with fault
// injection, [CheckOrder] for per-key order, and [TestPublisher], the
// behaviour every [outbox.Publisher] is held to, run from each publisher's
// tests with one call.
//
// PostgreSQL comes from pgstoretest (a pool on IDEM_POSTGRES_URL, a schema
// per test): a test whose server cannot be reached is skipped with a
// message, or fails when IDEM_REQUIRE_SERVICES=1 (as under make test).
package outboxtest
