// Package idemamqp consumes a RabbitMQ queue with an [idem.Guard], so that
// a handler runs at most once to completion per idempotency key however
// often the broker delivers the message: after a consumer crash, a lost
// ack, a reconnect, or a publisher's retry.
//
//	g, _ := idem.New(store, idem.Config{Namespace: "payments", MaxAttempts: 5})
//	c, err := idemamqp.New(g, "amqp://guest:guest@127.0.0.1:5672/", "orders", charge,
//		idemamqp.WithScope(func(d amqp.Delivery) string { return d.UserId }),
//		idemamqp.WithPrefetch(32))
//	if err != nil { … }
//	err = c.Run(ctx) // until ctx ends; reconnects on its own
//
// The consumer acks manually, and only once the handler's outcome is stored
// or the delivery turned out to be a duplicate of one whose outcome is.
//
// # How each delivery is settled
//
//	delivery                                      handler   settlement
//	new key                                       runs once
//	  returns nil                                           ack after the outcome is stored
//	  returns an error marked idem.Permanent                dead-letter (permanent); the failure is stored
//	  returns another error, or panics                      key released; requeued after the retry delay
//	key done before                               no        ack (a replay)
//	key failed permanently before                 no        dead-letter (permanent)
//	key in progress elsewhere (busy)              no        through the delay queue, back after the busy delay
//	key claimed more than the Guard's MaxAttempts no        dead-letter (too-many-attempts)
//	key reused with another body                  no        dead-letter (key-reused)
//	no key                                        no        dead-letter (missing-key), or runs unguarded (WithUnkeyed)
//	key unusable: empty, not a string, too long   no        dead-letter (invalid-key)
//	store unreachable for the claim               not yet   held, the claim retried with backoff
//	channel closed before the settlement          maybe     none: the broker delivers it again
//
// The names in parentheses are the [Reason] of the dead letter. This is
// the policy every idem consumer shares (idemkafka, idemnats), mapped onto
// RabbitMQ's settlements.
//
// "Dead-letter" means a reject without requeue, so that the queue's
// dead-letter exchange receives the message, or, with [WithDeadLetter], a
// publish to an exchange of your choice carrying the cause and the reason
// in headers, then an ack. A queue without a dead-letter exchange drops rejected
// messages: declare one with the queue, for instance
//
//	ch.ExchangeDeclare("orders.dlx", "fanout", true, false, false, false, nil)
//	ch.QueueDeclare("orders.dead", true, false, false, false, nil)
//	ch.QueueBind("orders.dead", "", "orders.dlx", false, nil)
//	ch.QueueDeclare("orders", true, false, false, false, amqp.Table{
//		"x-dead-letter-exchange": "orders.dlx",
//	})
//
// or set it by policy (rabbitmqctl set_policy DLX "^orders$"
// '{"dead-letter-exchange":"orders.dlx"}' --apply-to queues).
//
// # Keys and scopes
//
// The key comes from the header "idempotency-key" by default
// ([WithKeyHeader]), from the message-id property with
// WithKeyFunc([MessageIDKey]), or from any [KeyFunc]. The Guard's
// Config.MaxKeyLen and Config.ValidateKey apply to it.
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
// The Guard's Config.MaxAttempts counts the claims of a key that ended
// without an outcome (crashes, retryable errors, panics); the claim past
// it stores idem.ErrTooManyAttempts and the delivery is dead-lettered. A
// quorum queue's x-delivery-limit counts the broker's deliveries of a
// message (requeues and consumer crashes) and dead-letters (or drops) it
// past the limit, without the handler's say and without a stored outcome.
// Set x-delivery-limit above MaxAttempts, so that the Guard's cap fires
// first and later duplicates of the key are dead-lettered too; the broker's
// limit then only catches what never reaches the Guard. Busy trips through
// the delay queue and store outages (the delivery is held, not requeued)
// spend none of it. Classic queues have no delivery limit; MaxAttempts is
// the cap there. Both kinds of queue work the same otherwise.
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
// When Run's context ends the consumer stops taking deliveries, lets the
// running handlers finish for [WithShutdownTimeout], then cancels their
// contexts (their keys are released) and closes the connection, and
// RabbitMQ requeues what was not settled.
//
// The consumer logs with slog ([WithLogger], by default the Guard's
// logger): connections at Info, dead-letters, disconnections and store
// outages at Warn, panics at Error. The Guard's Config.Observer sees every
// claim and outcome; [WithObserver] sees how each delivery was settled
// and each connection event ([Event]).
package idemamqp
