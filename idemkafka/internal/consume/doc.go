// Package consume is the group consumer that idemkafka and its exactly-once
// PostgreSQL mode (idemkafka/kafkapg) share: the poll loop, a goroutine per
// partition that handles its records in order, pausing and resuming
// fetches, retries with backoff, dead letters, offset commits, rebalances
// and shutdown. What handling a batch of records means is a [Processor]:
// idemkafka's runs them through a Guard's DoBatch, kafkapg's through a
// PostgreSQL transaction that also stores the partition's offset.
package consume
