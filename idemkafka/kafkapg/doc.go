// Package kafkapg consumes Kafka records exactly once into PostgreSQL: the
// handler's business writes, the idem record of the record's key and the
// partition's next offset commit in one PostgreSQL transaction, or none of
// them does. On assignment each partition starts at the offset stored in
// PostgreSQL, not at Kafka's (the "storing offsets outside Kafka" pattern
// of the Kafka consumer documentation), so a crash between the database
// commit and a Kafka commit neither loses a record nor applies one twice;
// Kafka commits are still made, for lag dashboards only.
//
// # Layout
//
// kafkapg is a module of its own, github.com/idemgo/idem/idemkafka/kafkapg,
// beside idemkafka's: a Kafka user who keeps effects elsewhere imports
// idemkafka and downloads no PostgreSQL driver; a Kafka and PostgreSQL
// user imports this one, which brings idemkafka (the same consumer loop:
// partitions, pauses, retries, dead letters, rebalances, shutdown; its
// options pass through [WithConsumerOptions]) and pgstore (the records
// table and its TxGuard).
//
// # Transactions
//
// By default each batch of a partition's fetched records is one
// transaction: BEGIN; claim every key in one statement; run the handlers;
// store every outcome in one statement; store the offset; COMMIT. When a
// handler fails with an error that is not permanent, the batch rolls back,
// the records before it commit on their own, and the record is retried
// after a backoff. When a handler fails permanently (or a record has to be
// dead-lettered), the batch is done again record by record with pgstore's
// TxGuard.DoTx, whose savepoints undo the failed record's writes alone and
// store its failure. [WithPerRecordTransactions] commits each record in a
// transaction of its own, through DoTx.
//
// A duplicate of a key committed earlier (published twice, on any
// partition) finds its outcome and does not run; one in flight in another
// transaction waits for that transaction's end (at most
// [WithLockTimeout]) and then finds the outcome, or claims the key if that
// transaction rolled back. A record without a key, run with
// idemkafka.WithUnkeyedUnguarded, is exactly-once too: its writes commit
// with its offset.
//
// # Tables
//
// The records table is pgstore's (pgstore.Migrate); the offsets table is
// created by [Migrate]: one row per consumer group, topic and partition
// with the next offset to consume, which only moves forward (a member
// that lost its partition cannot move it back under the new owner).
//
//	pgstore.Migrate(ctx, pool, "idem_records")
//	kafkapg.Migrate(ctx, pool, "idem_kafka_offsets")
//	c, err := kafkapg.New(pool, charge, kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDeadLetter("orders.dlq")))
//	cl, err := kgo.NewClient(append([]kgo.Opt{
//		kgo.SeedBrokers("localhost:9092"),
//		kgo.ConsumerGroup("payments"),
//		kgo.ConsumeTopics("orders"),
//	}, c.ClientOpts()...)...)
//	err = c.Run(ctx, cl)
package kafkapg
