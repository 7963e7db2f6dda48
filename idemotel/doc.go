// Package idemotel reports what idem does as OpenTelemetry metrics and
// spans: the claims of a Guard and their outcomes, the store's latency, the
// operations it ran, the leases it lost, the runs it let through without
// idempotency (FailOpen), and what the message consumers did with their
// messages (processed, replayed, retried, dead-lettered; their lag). It is
// a module of its own, so that the core and the adapters stay free of
// OpenTelemetry; it reads the Guard's [idem.Observer] events, which every
// adapter's Guard reports (idemhttp, idemgrpc and the consumers run their
// operations through one), and the consumers' events through
// [consumer.Activity], so that it requires none of the consumers' modules.
//
//	tel, err := idemotel.New(idemotel.Config{}) // the global providers
//	g, err := idem.New(store, idem.Config{Observer: tel.Observe})
//	c, err := idemkafka.New(g, …, idemkafka.WithObserver(idemotel.ConsumerObserver[idemkafka.Event](tel, "orders")))
//
// The outbox relay's metrics are in the module idemotel/otelrelay, which
// requires the outbox (and its PostgreSQL driver); idemotel does not.
//
// # Metrics
//
// No attribute holds a key, a scope or a subject: they are unbounded, and
// may be personal data. Every instrument of a Guard has the attribute
// idem.namespace (the Guard's Config.Namespace).
//
//	name                 instrument  unit         attributes and meaning
//	idem.claims          counter     {claim}      claims answered, by idem.outcome: acquired, retried
//	                                              (acquired again after a release, a takeover or a lost
//	                                              lease), replayed (a stored outcome, from the store or the
//	                                              cache), busy, key_reused, too_many_attempts, error
//	idem.cache.hits      counter     {claim}      duplicates answered from the Guard's local cache (also
//	                                              counted by idem.claims)
//	idem.store.duration  histogram   s            seconds per store call, by idem.operation: claim, complete,
//	                                              fail, release, extend; error.type when it failed
//	idem.run.duration    histogram   s            seconds per operation run; error.type when it failed
//	idem.lease.lost      counter     {operation}  operations whose lease was lost or not confirmed in time
//	idem.fail_open       counter     {operation}  operations run without idempotency because the store failed
//	idem.too_large       counter     {operation}  outcomes too large for the store, kept without them
//
// The consumers' instruments ([ConsumerObserver]) have the attributes of
// OpenTelemetry's messaging conventions: messaging.system ("kafka",
// "nats", "rabbitmq"), messaging.destination.name (the topic, the
// JetStream stream, the queue) and, when known, messaging.consumer.group.name
// (Kafka's consumer group as given to ConsumerObserver, the JetStream
// consumer).
//
//	idem.consumer.messages  counter  {message}  messages finished, by idem.consumer.outcome: processed (the
//	                                            handler ran, its outcome is stored), replayed (a duplicate,
//	                                            answered from its stored outcome), dead_lettered, discarded
//	                                            (WithDiscardPoison), gave_up (the broker refused the dead
//	                                            letter MaxAttempts times; settled without it); the poison
//	                                            outcomes with idem.consumer.reason (consumer.Reason)
//	idem.consumer.retries   counter  {message}  messages to be tried again, by idem.consumer.retry: busy (the
//	                                            key is another consumer's), error (with error.type), or,
//	                                            one per try of a dead letter the broker did not take (the
//	                                            poison waits), dead_letter_refused (the broker answered no:
//	                                            the destination is missing or may not be written) or
//	                                            dead_letter_unreached (with error.type, idem.consumer.reason)
//	idem.consumer.lag       gauge    {message}  messages waiting to be consumed, as the broker last told:
//	                                            Kafka by partition (messaging.destination.partition.id: the
//	                                            high watermark of the last fetch minus the next offset,
//	                                            dropped when the partition is revoked or lost), JetStream by
//	                                            consumer (the NumPending of the last message settled).
//	                                            RabbitMQ reports none: a delivery does not carry it; read the
//	                                            queue's depth from the broker's own metrics
//
// error.type is the sentinel of idem an error wraps (store_unavailable,
// lease_lost, in_progress, closed, canceled, deadline_exceeded), permanent
// for an idem.Permanent error, else the error's Go type.
//
// # Spans
//
// Each step of a Do becomes a span, a child of the span in the caller's
// context (an HTTP server span of otelhttp, a consumer span of kotel):
// "idem claim", "idem run", then "idem complete", "idem fail" or "idem
// release", with the attributes idem.namespace, idem.outcome and
// idem.attempt (claims), and idem.key.hash: the first 16 hex digits of an
// HMAC-SHA256 of the scope and key under Config.KeySecret, which tells two
// operations apart without naming them (or letting a guessable key be
// found from its hash). A failed step's span has the error status with
// the error.type as its description; the error's message, which names the
// key, is recorded only with Config.RecordErrorText. A span is recorded when its step has ended (from the step's
// start, which the event's duration gives): the operation's own spans are
// children of the caller's span, siblings of "idem run". idemhttp and
// idemgrpc run the Guard with the request's context, so their spans are
// children of the request's span.
package idemotel
