// Package idemkafka runs Kafka consumers effectively once: a handler runs
// at most once to completion per idempotency key, however often Kafka
// redelivers a record (after a crash or a rebalance) or a producer
// publishes it again, over franz-go's kgo.Client and an idem.Guard.
//
// The caller owns the client. Create the consumer first, then the client
// with the consumer's [Consumer.ClientOpts] last, then [Consumer.Run]:
//
//	c, err := idemkafka.New(guard, charge, idemkafka.WithSharedScope())
//	cl, err := kgo.NewClient(append([]kgo.Opt{
//		kgo.SeedBrokers("localhost:9092"),
//		kgo.ConsumerGroup("payments"),
//		kgo.ConsumeTopics("orders"),
//	}, c.ClientOpts()...)...)
//	defer cl.Close()
//	err = c.Run(ctx, cl) // until ctx ends
//
// # Keys and scopes
//
// The key comes from the record's "idempotency-key" header
// ([WithKeyHeader]), or from a function of the record ([WithKeyFunc],
// [WithRecordKey]). A record without one is dead-lettered, or, with
// [WithUnkeyedUnguarded], run without idempotency. Every consumer makes a
// scope decision: [WithScope] keys each record within its tenant or
// producer, [WithSharedScope] says one key names one operation whoever
// produced it; New refuses to guess, because the same key from two
// tenants must not name one operation unless the user says so.
//
// # What happens to a record
//
// Partitions are handled concurrently, each strictly in offset order. The
// records of one fetch of a partition (up to [WithMaxBatch]) go through
// idem.Guard.DoBatch: their keys are claimed in one round trip and their
// outcomes stored in one, where the store has batch calls (memstore,
// redisstore, pgstore and dynamostore do). Then, for each record in order,
// by the policy every idem consumer shares:
//
//	handler returned nil, or a duplicate; an
//	outcome too large to keep (the handler ran)  → done
//	permanent error (idem.Permanent), stored or
//	replayed; idem.ErrTooManyAttempts; a key
//	reused with another payload; no key; a key
//	that cannot be read                          → dead-lettered, then done
//	any other error; key busy elsewhere; store
//	down; lease lost                             → retried with backoff
//
// A record that is retried stops its partition there: the partition's
// fetches are paused, the record is retried alone with backoff, and the
// others go on. An offset is committed only when its record and every
// record before it in its partition are done; commits go to Kafka every
// [WithCommitInterval], when a partition is revoked, and at shutdown. Set
// the Guard's Config.MaxAttempts so that a record whose handler keeps
// failing ends on the dead-letter topic instead of being retried forever.
//
// Dead letters go to the record's topic + ".dlq" ([WithDeadLetterTopic])
// with the original key, value and headers, plus the headers
// [HeaderDeadLetterCause], [HeaderDeadLetterReason], [HeaderDeadLetterTopic],
// [HeaderDeadLetterPartition], [HeaderDeadLetterOffset] and
// [HeaderDeadLetterKey]. A dead letter is produced at least once: a record
// whose permanent failure was stored, but whose dead letter was not
// acknowledged before a crash, is dead-lettered again when redelivered.
//
// # Rebalances and shutdown
//
// The client blocks rebalances while a poll's records are handed to the
// partitions (kgo.BlockRebalanceOnPoll). When a partition is revoked, its
// handlers' contexts are cancelled (cause [ErrRevoked]), their keys are
// released (or stored, if the handler finished anyway), and the offsets
// they finished are committed before the rebalance goes on; a lost
// partition stops the same way without a commit. When Run's context ends,
// fetching stops, the handlers in flight get [WithDrainTimeout] to finish
// (no new one starts), the finished offsets are committed and the member
// leaves the group.
//
// # Guarantees
//
// Those of the Guard's store: a key's handler never runs twice in
// parallel, and never again once its outcome is stored and retained. A
// crash after the handler's side effect and before the batch's outcomes
// are stored runs the handler again once its lease ends, unless the side
// effect is fenced with the lease token (idem.TokenFrom) or commits with
// the outcome: for effects in PostgreSQL, the module
// github.com/idemgo/idem/idemkafka/kafkapg runs the handler, the outcome
// and the partition's offset in one transaction, exactly once.
//
// # Observing
//
// [WithLogger] takes the warnings; [WithObserver] gets an [Event] for each
// finished batch (with the partition's lag), retry, dead letter, commit
// and rebalance; the Guard's Observer (idem.Config) sees every claim and
// outcome.
package idemkafka
