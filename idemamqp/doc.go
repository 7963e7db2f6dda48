// Package idemamqp consumes a RabbitMQ queue with an [idem.Guard], so that
// a handler runs at most once to completion per idempotency key however
// often the broker delivers the message: after a consumer crash, a lost
// ack, a reconnect, or a publisher's retry.
//
//	g, _ := idem.New(store, idem.Config{Namespace: "payments"})
//	c, err := idemamqp.New(g, "amqp://guest:guest@127.0.0.1:5672/", "orders", charge,
//		idemamqp.WithScope(func(d amqp.Delivery) string { return d.UserId }),
//		idemamqp.WithDeadLetter("", "orders.dead"))
//	if err != nil { … }
//	err = c.Run(ctx) // until ctx ends; reconnects on its own
//
// The consumer acks manually, and only once the handler's outcome is stored
// or the delivery turned out to be a duplicate of one whose outcome is.
//
// # How each delivery is settled
//
// Every idem consumer (idemkafka, idemnats, idemamqp) decides a message by
// one table, package consumer's; on RabbitMQ:
//
//	delivery                                      handler    settlement
//	new key
//	  returns nil                                 runs once  ack after the outcome is stored
//	  returns an error marked idem.Permanent      runs once  poison (permanent); the failure is stored
//	  returns another error, or panics            runs       key released; held for the retry backoff,
//	                                                         then requeued; poison (too-many-attempts)
//	                                                         after WithMaxAttempts failures in a row
//	key done before                               no         ack (a replay)
//	key failed permanently before                 no         poison (permanent)
//	key in progress elsewhere (busy)              no         through the delay queue, back after the busy delay
//	key claimed more than the Guard's MaxAttempts no         poison (too-many-attempts)
//	key reused with another body                  no         poison (key-reused)
//	no key                                        no         poison (missing-key), or runs unguarded
//	                                                         (WithUnkeyedUnguarded)
//	key unusable: empty, not a string, too long   no         poison (invalid-key)
//	store unreachable for the claim               not yet    held, the claim retried with backoff
//	channel closed before the settlement          maybe      none: the broker delivers it again
//
// The names in parentheses are the consumer.Reason of the poison.
//
// # Poison
//
// [New] refuses to build a consumer without a poison decision, as it
// refuses one without a scope decision:
//
//   - [WithDeadLetter](exchange, routingKey) publishes poison there, with
//     the mandatory flag and publisher confirms, and acks it once the
//     broker confirmed it. The dead letter is the original message (body,
//     headers, properties but user-id) with the headers of package
//     consumer (consumer.HeaderReason, consumer.HeaderCause,
//     consumer.HeaderKey, …) and where it came from: [HeaderQueue],
//     [HeaderExchange], [HeaderRoutingKey].
//   - [WithDiscardPoison] logs poison (warn, with its reason and cause),
//     reports [EventDiscarded], and rejects it without requeue. RabbitMQ
//     then routes it to the queue's own dead-letter exchange
//     (x-dead-letter-exchange, by argument or policy) if the queue has
//     one, without idem's headers, and drops it otherwise.
//
// A handler that fails without a permanent mark, or panics, runs
// consumer.DefaultMaxAttempts (10) times for one key, or [WithMaxAttempts];
// then its delivery is poison (too-many-attempts). RabbitMQ keeps no
// count that fits (a classic queue has only the Redelivered flag, and a
// requeued message comes back under a new delivery tag), so the consumer
// counts in memory, by scope and key; the Guard's Config.MaxAttempts, kept
// in the store, counts across consumers and restarts and applies too. A
// busy key, a store that cannot be reached and a shutdown are not
// attempts.
//
// A dead letter always fits. AMQP sends a message's headers in a content
// header that must fit one frame of the size the connection negotiated
// (frame_max, 128 KiB by default; RabbitMQ closes the whole connection
// over a larger one), and bounds the body by the broker's
// max_message_size (128 MiB by default, [WithMaxMessageSize]). So the
// dead letter copies the key only up to consumer.MaxCopiedKey bytes, and
// leaves out what would not fit: the original's headers over 1 KiB, its
// body, then its other headers, each recorded by size and SHA-256
// (consumer.HeaderBodySize, consumer.HeaderCutHeaders, …). One the broker
// still refuses as too large (precondition failed) is sent again without
// the original's body and headers.
//
// A dead letter the broker refuses (a nack; a return, when no queue is
// bound to take it; a channel error: an exchange that does not exist
// (404) or may not be written (403)) is tried again with the retry
// backoff, WithMaxAttempts times in all; then the consumer gives up on it:
// it logs the delivery at error level (queue, exchange, routing key,
// message-id), reports [EventDiscarded] with the refusal in
// Event.BrokerErr, and rejects the delivery without requeue, to the
// queue's own dead-letter exchange if it has one, so that one message
// never holds a handler for good. The refusal closes the consumer's
// publishing channel only, which it opens again: the connection, and the
// deliveries in flight on it, are not touched. A broker that cannot be
// reached (the connection closed, no confirm within 10 s) is an outage:
// the delivery is never settled without its dead letter; it is held while
// the connection lives, and the broker delivers it again after a
// reconnect. Every try the broker did not confirm is logged (a refusal at
// error level) and reported ([EventDeadLetterFailed], Refused telling the
// broker's no from an outage).
//
// The destination must exist when [Consumer.Run] starts: before it
// subscribes, Run declares the WithDeadLetter exchange passively (through
// the default exchange, the queue the routing key names), and returns a
// *consumer.DeadLetterMissingError naming it, without consuming anything,
// when the broker answers 404 or 403.
//
// A publisher cannot steer a dead letter, nor a busy delivery's copy
// through the delay queue: the headers RabbitMQ or its plugins act on when
// a message is published (CC and BCC, which route it to more queues;
// x-delay, x-stream-filter-value, x-deduplication-header) and the
// expiration property are kept, as text, under
// consumer.HeaderOriginalPrefix ("idem-dead-letter-original-CC",
// "idem-dead-letter-original-expiration"), never live. A dead-letter
// exchange of type headers routes by every other header of the original:
// prefer a direct or fanout one.
//
// A queue without a dead-letter exchange drops what is rejected without
// requeue. Declare one with the queue, for instance
//
//	ch.ExchangeDeclare("orders.dlx", "fanout", true, false, false, false, nil)
//	ch.QueueDeclare("orders.dead", true, false, false, false, nil)
//	ch.QueueBind("orders.dead", "", "orders.dlx", false, nil)
//	ch.QueueDeclare("orders", true, false, false, false, amqp.Table{
//		"x-dead-letter-exchange": "orders.dlx",
//	})
//
// or set it by policy (rabbitmqctl set_policy DLX "^orders$"
// '{"dead-letter-exchange":"orders.dlx"}' --apply-to queues). The consumer
// cannot check it: AMQP does not tell a client a queue's arguments or
// policy.
//
// # Keys and scopes
//
// The key comes from the header "idempotency-key" by default
// ([WithKeyHeader]), from the message-id property with
// WithKeyFunc([MessageIDKey]), or from any function ([WithKeyFunc]). The
// Guard's Config.MaxKeyLen and Config.ValidateKey apply to it.
//
// [New] refuses to build a consumer without a scope decision. With
// [WithScope] every key lives in the scope of the delivery's tenant or
// publisher, so that a publisher that sends (by mistake or on purpose)
// another tenant's key can neither have its message acked as a duplicate
// of the other's without running, nor have its own run stand in for the
// other's. [WithSharedScope] is for queues whose publishers all share one
// key space. The user-id property is a good scope: RabbitMQ refuses a
// message whose user-id is not the publishing connection's user.
//
// # Busy keys and the delay queue
//
// RabbitMQ has no delayed requeue: a nack with requeue puts the message
// back at once, and a consumer would spin on a key that another consumer
// holds (or that a crashed consumer holds until its lease ends). So a busy
// delivery is copied to a delay queue and then acked. The consumer
// declares that queue, named [DelayQueueName](queue, busy delay) (for
// example "orders.idem-delay.1s"): durable, with x-message-ttl the busy
// delay and the default exchange as its dead-letter exchange, routing to
// the queue. Nobody consumes it: each message expires after the delay and
// RabbitMQ dead-letters it back to the queue, where it is claimed again.
//
//   - The copy is published with the mandatory flag and publisher confirms;
//     the original is acked only after the broker confirmed the copy and did
//     not return it. If that ack is lost, both come back: a duplicate, which
//     the Guard answers.
//   - The copy keeps the body, headers and properties except user-id
//     (RabbitMQ refuses another user's) and expiration, and it comes back
//     through the default exchange with the queue's name as routing key,
//     with an x-death header. A copy whose key, scope or fingerprint would
//     differ (a [WithScope] that reads the user-id) is not sent: that
//     delivery is held for the busy delay and requeued instead.
//   - A trip through the delay queue is a new message: it spends nothing
//     of a quorum queue's x-delivery-limit.
//   - The delay is in the queue's name so that consumers deployed with
//     different delays do not fail on each other's queue arguments. A
//     delay queue that exists with other arguments (yours, declared as a
//     quorum queue with x-dead-letter-strategy at-least-once, say) is used
//     as it is. RabbitMQ's dead-lettering out of a classic queue is at most
//     once: a broker crash at that moment can lose the copy.
//   - WithDelayQueue("") does without: a busy delivery is held for the busy
//     delay, then requeued.
//
// The Guard's Config.Wait is the other way to handle a busy key: Do waits
// for the holder's outcome and the delivery is then acked as a replay,
// holding one of the consumer's handlers meanwhile.
//
// # Attempts, classic and quorum queues
//
// Besides the consumer's own count ([WithMaxAttempts]), the Guard's
// Config.MaxAttempts counts the claims of a key that ended without an
// outcome (crashes, retryable errors, panics) in the store; the claim past
// it stores idem.ErrTooManyAttempts and the delivery is poison. A
// quorum queue's x-delivery-limit counts the broker's deliveries of a
// message (requeues and consumer crashes) and dead-letters (or drops) it
// past the limit, without the handler's say and without a stored outcome.
// Set x-delivery-limit above both MaxAttempts, so that idem's caps fire
// first, with the cause in the dead letter, and later duplicates of the key
// are poison too; the broker's limit then only catches what never reaches
// the Guard. Busy trips through
// the delay queue and store outages (the delivery is held, not requeued)
// spend none of it. Classic queues have no delivery limit; MaxAttempts is
// the cap there. Both kinds of queue work the same otherwise.
//
// # Claims ahead of the workers
//
// A delivery's store round trips are not on its handler's path. The
// consumer takes the deliveries waiting in its prefetch buffer, claims
// their keys in one store round trip (storage.Store.ClaimBatch) and hands
// them to its [WithConcurrency] handlers; a handler that returned leaves
// its value to be stored, with those of the other handlers that returned
// meanwhile, in one round trip (storage.Store.CompleteBatch), after which
// their deliveries are acked, a run of them with one basic.ack (multiple)
// where no other delivery is among them. Under load a claim waits for the
// deliveries behind its first, as long as the last claim took and at most
// 300µs, so that each round trip serves many deliveries; a few claims and
// outcome writes may be under way at once, for a store whose batch calls
// take milliseconds. The guarantees are Do's: a
// key's lease starts at its claim and the Guard's heartbeat keeps it
// while the delivery waits for a handler and while its value waits to be
// stored; a delivery acked is one whose outcome is stored; a delivery
// whose lease was lost while it waited is claimed again when a handler
// takes it; two deliveries of one key in a claim are one operation (the
// second is answered after the first, as a duplicate or busy); and at a
// shutdown or a lost channel the keys claimed for deliveries whose
// handler did not start are released. A crash between a handler's return
// and its stored outcome runs it again once its lease ends, as it does
// after Do; storing the outcome behind the handler makes that window
// longer by the outcome writer's round trip, during which the handler's
// goroutine has gone on to the next delivery. Where a second run of an
// effect matters, fence it with the token (idem.TokenFrom) or write it in
// the store's own transaction.
//
// # Connections
//
// amqp091 does not reconnect by default, and its optional Config.Recovery
// keeps the channel, whose delivery tags then start again at 1, so that an
// ack of a delivery from before a reconnect would acknowledge another
// message; [WithConfig] refuses it. The consumer reconnects by itself,
// with backoff ([WithReconnectBackoff]), when the connection or a channel
// closes or the broker cancels the subscription, with a new connection and
// new channels. Handlers still running from the old connection finish and
// store their outcome; their acks fail, RabbitMQ delivers those messages
// again, and they are acked as replays. Nothing is lost and nothing runs
// twice.
//
// # Shutdown and observability
//
// When Run's context ends the consumer stops taking deliveries (releasing
// the keys claimed for those waiting), lets the running handlers finish
// for [WithDrainTimeout], then cancels their contexts (their keys are
// released), stores the values of the handlers that returned and acks
// their deliveries, and closes the connection, and RabbitMQ requeues what
// was not settled.
//
// A handler's context carries the W3C trace context of the message's
// traceparent, tracestate and baggage headers: consumer.TraceFrom returns
// it, for OpenTelemetry's propagators to extract.
//
// The consumer logs with slog ([WithLogger], by default the Guard's
// logger): connections at Info, poison, disconnections and store outages
// at Warn, panics and dead letters given up on at Error; no log line and
// no error shows the URL's password. The Guard's Config.Observer sees
// every claim and outcome; [WithObserver] sees how each delivery was
// settled and each connection event ([Event]).
package idemamqp
