// Package consume is the group consumer that idemkafka and its exactly-once
// PostgreSQL mode (idemkafka/kafkapg) share: the poll loop, a goroutine per
// partition that handles its records in order, pausing and resuming
// fetches, retries with backoff, dead letters, offset commits, rebalances
// and shutdown. What handling a batch of records means is a [Processor]:
// idemkafka's runs them through a Guard's DoBatch, kafkapg's through a
// PostgreSQL transaction that also stores the partition's offset.
//
// The seam is small: [New] builds the options (idemkafka's Option
// functions, the chassis's checks) and the consumer at once; a Processor
// gets [Item]s and, through their [Partition], runs a handler
// ([Partition.Run]), decides on its answer ([Partition.Decide],
// [Partition.Unkeyed]) and settles the record ([Partition.Settle]). The
// verdict itself is the chassis's. [Event] is idemkafka's Event, under its
// name there.
package consume
