// Package idemkafka runs Kafka consumers effectively once: a handler runs
// at most once to completion per idempotency key, however often Kafka
// redelivers a record (after a crash or a rebalance) or a producer
// publishes it again, over franz-go's kgo.Client and an idem.Guard.
//
// The caller owns the client. Create the consumer first, then the client
// with the consumer's [Consumer.ClientOpts] last, then [Consumer.Run]:
//
//	c, err := idemkafka.New(guard, charge, idemkafka.WithSharedScope(), idemkafka.WithDeadLetter("orders.dlq"))
//	cl, err := kgo.NewClient(append([]kgo.Opt{
//		kgo.SeedBrokers("localhost:9092"),
//		kgo.ConsumerGroup("payments"),
//		kgo.ConsumeTopics("orders"),
//	}, c.ClientOpts()...)...)
//	defer cl.Close()
//	err = c.Run(ctx, cl) // until ctx ends
//
// # Keys, scopes and poison
//
// The key comes from the record's "idempotency-key" header
// ([WithKeyHeader]), or from a function of the record ([WithKeyFunc],
// [WithRecordKey]). A record without one is poison (missing-key), or, with
// [WithUnkeyedUnguarded], runs without idempotency; one whose key is
// empty, sent twice or longer than the Guard's Config.MaxKeyLen is poison
// (invalid-key). Every consumer makes a scope decision: [WithScope] keys
// each record within its tenant or producer, [WithSharedScope] says one
// key names one operation whoever produced it. And a poison decision:
// [WithDeadLetter] produces poison to a topic, [WithDiscardPoison] drops
// it, logged. New refuses to guess either.
//
// # What happens to a record
//
// Partitions are handled concurrently, each strictly in offset order. The
// records of one fetch of a partition (up to [WithMaxBatch]) go through
// idem.Guard.DoBatch: their keys are claimed in one round trip and their
// outcomes stored in one, where the store has batch calls (memstore,
// redisstore, pgstore and dynamostore do). Then each record is settled in
// order by the table every idem consumer shares (package consumer):
//
//	handler returned nil, or a duplicate; an
//	outcome too large to keep (the handler ran)     → done
//	permanent error (idem.Permanent), stored or
//	replayed; idem.ErrTooManyAttempts; a key
//	reused with another payload; no key; a key
//	that cannot be used                             → poison: dead-lettered (or discarded), then done
//	any other error, or a panic                     → retried with backoff; poison after
//	                                                  WithMaxAttempts failures in a row (10)
//	key busy elsewhere                              → retried after the busy delay
//	store down; lease lost; shutdown                → retried with backoff, no attempt counted
//
// A record that is retried stops its partition there: the partition's
// fetches are paused, the record is retried alone, and the other
// partitions go on. An offset is committed only when its record and every
// record before it in its partition are done; commits go to Kafka every
// [WithCommitInterval], when a partition is revoked, and at shutdown.
//
// # Dead letters
//
// A dead letter is the record (its key, value and headers) with the
// headers of package consumer (consumer.HeaderReason, consumer.HeaderCause,
// consumer.HeaderKey, …) and [HeaderTopic], [HeaderPartition] and
// [HeaderOffset]. It always fits: it is never larger than the producing
// client's kgo.ProducerBatchMaxBytes less 4 KiB, and what it leaves out to
// fit is recorded by size and SHA-256; if the broker still refuses it as
// too large, it is produced again without the record's key, value and
// headers. A dead letter the broker refuses (any error Kafka says is not
// retriable, or a topic that does not exist once franz-go stopped waiting
// for it) is tried [WithMaxAttempts] times, then given up on: an error log
// with the record's topic, partition and offset, [EventDiscarded], and the
// partition goes on. A broker that cannot be reached is an outage: the
// record waits. Every try the broker did not take is logged (a refusal at
// error level) and reported ([EventDeadLetterFailed], Refused telling the
// broker's no from an outage), so a partition never waits silently.
//
// The dead-letter topic must exist when [Consumer.Run] starts: Run asks the
// cluster first (a metadata request that creates the topic only when the
// producing client has kgo.AllowAutoTopicCreation) and, when the answer is
// UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED or an invalid
// name, returns a *consumer.DeadLetterMissingError naming it without
// consuming anything: the first poison record would otherwise hold its
// partition until its refusals were given up. A cluster that does not
// answer within 10 s is logged, and Run consumes. Kafka acts on no record
// header, so a dead letter carries the record's headers as they were.
//
// A dead letter is produced at least once: a record whose
// permanent failure was stored, but whose dead letter was not acknowledged
// before a crash, is dead-lettered again when redelivered.
//
// # The handler's context
//
// It carries the key's lease token (idem.TokenFrom), the values of the
// record's own context (kgo.Record.Context, where a kgo hook such as kotel
// puts the consumer span) and the record's W3C trace headers
// (consumer.TraceFrom). Its cancellation is the consumer's alone. A
// handler that panics fails with a *consumer.PanicError, logged with its
// stack.
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
// [WithLogger] takes the warnings and errors (the Guard's logger by
// default); [WithObserver] gets an [Event] for each finished batch (with
// the partition's lag), retry, dead letter, discarded poison, commit and
// rebalance; the Guard's Observer (idem.Config) sees every claim and
// outcome.
package idemkafka
