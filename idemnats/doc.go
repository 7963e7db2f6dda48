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
//	c, err := idemnats.New(guard, cons, charge,
//		idemnats.WithSharedScope(), idemnats.WithDeadLetter(js, "dlq.payments"))
//	err = c.Run(ctx) // until ctx ends
//
// # What happens to a message
//
// Every idem consumer (idemkafka, idemnats, idemamqp) decides a message by
// one table, package consumer's; on JetStream:
//
//	message                                        handler    settlement
//	new key
//	  returns nil                                  runs once  Ack after the outcome is stored
//	  returns an error marked idem.Permanent       runs once  poison (permanent); the failure is stored
//	  returns another error, or panics             runs       key released; NakWithDelay(retry backoff);
//	                                                          poison (too-many-attempts) after
//	                                                          WithMaxAttempts failures in a row
//	key done before                                no         Ack (a replay)
//	key failed permanently before                  no         poison (permanent)
//	key held by another consumer's live lease      no         NakWithDelay(busy delay)
//	key claimed more than the Guard's MaxAttempts  no         poison (too-many-attempts)
//	key reused with other data                     no         poison (key-reused)
//	no key                                         no         poison (missing-key), or runs unguarded
//	                                                          (WithUnkeyedUnguarded)
//	key unusable: empty, sent twice, too long      no         poison (invalid-key)
//	store down, lease lost                         maybe      key released; NakWithDelay(retry backoff)
//	Run stopped before the handler started         no         key released; NakWithDelay(≤ fetch wait)
//
// The names in parentheses are the consumer.Reason of the poison. Term is
// used rather than TermWithReason, which servers before 2.10.4 ignore
// without terminating the message. Messages JetStream gives up on by
// itself (MaxDeliver) are not seen here: watch the server's MAX_DELIVERIES
// advisories, and keep MaxDeliver unset or well above WithMaxAttempts and
// the Guard's Config.MaxAttempts, remembering that every busy or retry Nak
// is a delivery too.
//
// # Poison
//
// [New] refuses to build a consumer without a poison decision, as it
// refuses one without a scope decision:
//
//   - [WithDeadLetter](js, subject) publishes poison to subject, waits for
//     the stream's ack, then terminates the message. The dead letter is
//     the original (its data, its headers, the Nats-* ones renamed) with the
//     headers of package consumer (consumer.HeaderReason,
//     consumer.HeaderCause, consumer.HeaderKey, …) and where it came from:
//     [HeaderStream], [HeaderSubject], [HeaderSequence], [HeaderDelivered]
//     and [HeaderMsgID].
//   - [WithDiscardPoison] logs poison (warn, with its reason and cause),
//     reports [EventDiscarded], and terminates it.
//
// A handler that fails without a permanent mark, or panics, runs
// consumer.DefaultMaxAttempts (10) times for one message, or
// [WithMaxAttempts]; then the message is poison (too-many-attempts).
// JetStream's NumDelivered does not fit the count (every Nak of a busy key
// or a store outage is a delivery too), so the consumer counts in memory,
// by the message's stream and sequence; the Guard's Config.MaxAttempts,
// kept in the store, counts across consumers and restarts and applies
// too. A busy key, a store that cannot be reached and a shutdown are not
// attempts.
//
// A dead letter always fits. A NATS server refuses a message larger than
// its max_payload (1 MiB by default; the dead-letter connection's
// nats.Conn.MaxPayload says what it is), and a stream one whose headers
// are over 64 KiB or that is larger than its max_msg_size. So the dead
// letter copies the key only up to consumer.MaxCopiedKey bytes, and leaves
// out what would not fit the max_payload, its headers 64 KiB: the
// original's headers over 1 KiB, its data, then its other headers, each
// recorded by size and SHA-256 (consumer.HeaderBodySize,
// consumer.HeaderCutHeaders, …). One the stream still refuses as too large
// is sent again without the original's data and headers.
//
// The subject must be a stream's when [Consumer.Run] starts: Run asks
// JetStream which stream takes it, and returns a
// *consumer.DeadLetterMissingError naming it, without consuming anything,
// when none does. A publisher cannot steer a dead letter: JetStream acts
// on the Nats-* headers of a message published (Nats-Expected-* make the
// publish conditional, Nats-Rollup purges, Nats-TTL expires, Nats-Msg-Id
// drops it as a copy), so the dead letter keeps them, in whatever case
// they came, under consumer.HeaderOriginalPrefix, never live (the
// original's Nats-Msg-Id is [HeaderMsgID]). Every try of a dead letter
// the server did not take is logged (a refusal at error level) and
// reported ([EventDeadLetterFailed], Refused telling the server's no from
// an outage).
//
// A dead letter the broker refuses (no stream takes the subject, the
// stream or the account refuses it, it is too large even stripped) is
// tried again with the retry backoff, WithMaxAttempts times in all; then
// the consumer gives up on it: it logs the message at error level (stream,
// sequence, subject, key), reports [EventDiscarded] with the refusal in
// Event.BrokerErr, and terminates the message, which stays in its stream
// while the stream's retention keeps it. A dead letter that cannot reach
// the server (the connection down or closed, no answer within 5 s) is an
// outage: the message is never terminated without its dead letter; it is
// held, InProgress keeping JetStream from redelivering it, and the publish
// tried again, without end, until it is stored or Run stops (then the
// message is naked, and comes back). A subject the connection may not
// publish to gets no answer from the server, only an asynchronous error:
// it looks like an outage, and holds the message until the permission is
// granted.
//
// While a message is held for its dead letter, the messages after it go
// on; a fetch loop holds two batches at most, so a long outage of the
// dead-letter stream stops the loop once both are held.
//
// # Keys and scopes
//
// The key is the Nats-Msg-Id header by default, the header JetStream's own
// duplicate window reads ([WithKeyHeader], [WithKeyFunc] for others). The
// payload fingerprinted with it is the message's data ([WithFingerprint]):
// the same key with other data is poison (key-reused). An empty key, or
// one sent twice, is poison (invalid-key); a message without one is
// poison (missing-key) unless [WithUnkeyedUnguarded] runs it without
// idempotency.
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
// The decisions shared by every idem consumer (the scope and poison rules,
// what each answer of the Guard means for the message, the dead letter's
// headers) come from one chassis, so idemamqp and idemkafka treat messages
// the same way, with the same option names.
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
// gets the stored outcome (or, with other data, is poison: key-reused). A
// new operation needs a new id.
//
// # Batches, order and AckWait
//
// Run fetches up to [WithBatchSize] messages at a time. The messages that
// have arrived when one is taken (under load, a whole batch) form a chunk:
// the Guard claims the chunk's keys in one store call (the store's
// ClaimBatch: one round trip where the store has a batch of its own), the
// handlers run one after another, in stream order, and the outcomes are
// stored in one call (CompleteBatch) before the messages are acked
// ([idem.Guard.DoBatchIndependent]). A handler starts when the one before it
// returned, while that one's outcome is still on its way to the store. The
// next Fetch starts as soon as the batch's last message has arrived, so
// its claims overlap the handlers before it, and its handlers follow
// theirs: a fetch loop holds at most three batches (one whose outcomes
// are being stored and its messages acked, one whose handlers run, the
// next fetched and claimed), so keep the consumer's MaxAckPending at least
// three times the batch size times the concurrency.
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
// finish within [WithDrainTimeout]; past it their context is cancelled,
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
// # Trace context
//
// A handler's context carries the W3C trace context of the message's
// headers (traceparent, tracestate, baggage; their names matched without
// regard to case, so that those an HTTP header carrier canonicalized are
// found too): consumer.TraceFrom returns it, for OpenTelemetry's
// propagators.
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
