// Package idemnats handles the messages of a NATS JetStream pull consumer
// effectively once, through an [idem.Guard].
//
// JetStream delivers at least once: a message that is not acked within the
// consumer's AckWait, or whose consumer died, is delivered again. A
// [Consumer] claims each message's idempotency key before its handler runs
// and acks the message only once the handler's outcome is stored, so a
// redelivery, or a duplicate published later, finds the outcome and is
// acked without running the handler again:
//
//	cons, _ := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
//		Durable: "payments", AckPolicy: jetstream.AckExplicitPolicy,
//	})
//	c, err := idemnats.New(guard, cons, charge, idemnats.WithSharedScope())
//	err = c.Run(ctx) // until ctx ends
//
// # What happens to a message
//
//	handler returns nil, or the key has a stored outcome    Ack
//	the key is held by another consumer's live lease         NakWithDelay(busy delay)
//	handler error (not permanent), panic, store down         release the key, NakWithDelay(retry delay)
//	handler error marked idem.Permanent                      store it, dead-letter, Term
//	idem.ErrTooManyAttempts (Config.MaxAttempts)             dead-letter, Term
//	no key (DeadLetterUnkeyed), unusable key, key reused     dead-letter, Term
//	no key, WithUnkeyed(RunUnkeyed)                          handler runs unguarded; Ack, or as above
//	Run's context ended before the handler started           release, NakWithDelay(≤ fetch wait)
//
// Dead-lettering publishes the message to the subject given to
// [WithDeadLetter], with the cause in its headers ([CauseHeader],
// [ReasonHeader], …), and waits for the stream's ack before it terminates
// the original; without WithDeadLetter, poison is terminated and logged.
// Term is used rather than TermWithReason, which servers before 2.10.4
// ignore without terminating the message. Messages JetStream gives up on
// by itself (MaxDeliver) are not seen here: watch the server's
// MAX_DELIVERIES advisories, and keep MaxDeliver unset or well above the
// Guard's Config.MaxAttempts, remembering that every busy or retry Nak is a
// delivery too.
//
// # Keys and scopes
//
// The key is the Nats-Msg-Id header by default, the header JetStream's own
// duplicate window reads ([WithKeyHeader], [WithKeyFunc] for others). The
// payload fingerprinted with it is the message's data ([WithFingerprint]):
// the same key with other data is dead-lettered ([ReasonKeyReused]).
//
// New refuses to build a Consumer without a scope decision. Keys are
// chosen by publishers, and without scopes every publisher shares one key
// space: a tenant that publishes another tenant's key makes the consumer
// ack that tenant's message as a duplicate without handling it. Pass
// [WithScope] with a function naming the tenant of a message (from a
// subject token, or a header only trusted publishers set), or
// [WithSharedScope] when every publisher is trusted with every key. Note
// that the stream's duplicate window (below) is one key space per stream
// whatever the scope: tenants that share a stream should prefix their
// Nats-Msg-Ids with the tenant, or carry the key in another header.
//
// The decisions shared by every idem adapter (the scope rule, what each
// answer of the Guard means for the message) come from one policy, so
// idemamqp and idemkafka treat messages the same way; the option names are
// the same where the brokers allow.
//
// # JetStream's duplicate window and idem
//
// A stream with a duplicate window (StreamConfig.Duplicates, two minutes
// by default) drops a publish whose Nats-Msg-Id it saw within the window:
// it dedupes publishes, so a producer may retry a publish safely. It does
// nothing for deliveries: a stored message is redelivered after AckWait, a
// crash or a Nak, and the window does not cover a duplicate published
// after it, a message republished to another stream, or two producers
// whose retries are minutes apart. idem dedupes the work a message causes,
// for as long as the Guard's retention (24 hours by default), across every
// redelivery, stream and consumer that shares the store and scope. The two
// complement each other: the window keeps duplicate copies out of the
// stream, so fewer deliveries reach the store at all, and idem catches the
// rest.
//
// The pitfall: the window remembers a Nats-Msg-Id for its whole length,
// whatever became of the message. A producer that publishes a corrected
// message under the same id within the window gets a PubAck with Duplicate
// set, and its message is silently dropped; check PubAck.Duplicate. idem
// then keeps the key for its own retention: a new message under a used key
// gets the stored outcome (or, with other data, is dead-lettered as
// reused). A new operation needs a new id.
//
// # Batches, order and AckWait
//
// Run fetches up to [WithBatchSize] messages at a time. The messages that
// have arrived when one is taken (under load, a whole batch) form a chunk:
// the Guard claims the chunk's keys in one store round trip where the
// store can ([idem.BatchClaimer]), the handlers run one after another, in
// stream order, and the outcomes are stored in one round trip
// ([idem.BatchCompleter]) before the messages are acked
// ([idem.Guard.DoBatchUnordered]). A handler starts when the one before it
// returned, while that one's outcome is still on its way to the store. The
// next Fetch starts as soon as the batch's last message has arrived, so
// its claims overlap the handlers before it, and its handlers follow
// theirs: a fetch loop holds at most two batches, so keep the consumer's
// MaxAckPending at least twice the batch size times the concurrency.
// [WithConcurrency] runs several fetch loops, with order kept within each.
//
// Order holds for the messages handled at their first try. A message that
// does not finish (a retryable error, a busy key) does not hold up the
// others of its chunk: it is naked and comes back after them. With the
// Guard's Config.Wait set, a busy key is waited for once the rest of its
// chunk is handled and stored, and its handler, if the holder gave up,
// runs then, possibly beside the next chunk's.
//
// Every message of a batch is delivered at once, so a message may wait its
// turn longer than AckWait. Every AckWait/3 the consumer sends InProgress
// for each message of its batches that is neither acked nor naked yet, so
// JetStream does not redeliver it while it is held. The Guard's heartbeat,
// which keeps the store lease, runs beside it at the Guard's own Lease/3.
//
// # Stopping
//
// When Run's context ends, Run fetches no more and hands back the messages
// whose handler has not started. They are redelivered once the Run's own
// pull requests have expired on the server (at most the fetch wait), so
// that none is sent to a request nobody listens to. The running handlers
// finish within [WithShutdownTimeout]; past it their context is cancelled,
// and the keys of those that give up are released. Run settles every
// message and returns once every goroutine it started has ended. A message
// the server sent while the Fetch was being cancelled never reaches the
// consumer (nats.go drops it with the cancelled request) and comes back
// after AckWait.
//
// A connection that drops is nats.go's to restore; Run retries its fetches
// meanwhile. The acks of messages handled while it was down reach the
// server after the reconnect or are lost, in which case the redelivery is
// acked as a duplicate.
//
// # Guarantees
//
// Those of the Guard: a handler that returned nil for a key does not run
// again for that key while its outcome is retained, and never runs twice
// at once. A consumer killed after its handler's side effect and before
// the outcome was stored leaves the window idem's documentation describes:
// the message is redelivered and, once the lease ends, handled again,
// unless the side effect is fenced by the token ([idem.TokenFrom]).
package idemnats
