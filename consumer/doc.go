// Package consumer is what idem's message consumers (idemkafka, idemnats
// and idemamqp) share and their users read: the reasons a message is
// dead-lettered, the headers a dead letter carries, the errors of a
// message without a usable key and of a handler that panicked, the default
// bound on a message's attempts, and the trace context a handler gets.
//
// The three consumers decide every message the same way, by one table:
//
//	the handler returned nil, or the key has a stored outcome   acknowledge
//	the key is held by another consumer's live lease            redeliver after the busy delay
//	the store cannot be reached, a lease was lost, shutdown     redeliver after a backoff
//	the handler's error (not permanent), or a panic             redeliver after a backoff,
//	                                                            dead-letter after MaxAttempts
//	the handler's error marked idem.Permanent                   store it, dead-letter
//	idem.ErrTooManyAttempts (the Guard's Config.MaxAttempts)    dead-letter
//	no key, an unusable key, a key reused with another payload  dead-letter
//	the scope, key or fingerprint function panicked             dead-letter
//
// # Poison
//
// A consumer refuses to start without a poison decision, as it refuses to
// start without a scope decision: a dead-letter destination (each
// consumer's WithDeadLetter), or WithDiscardPoison, which says in code
// that poison may be dropped (logged, and reported to the observer).
//
// A handler that fails without a permanent mark, or panics, is tried
// [DefaultMaxAttempts] times (each consumer's WithMaxAttempts), then its
// message is dead-lettered with [ReasonTooManyAttempts]. The count is the
// store's count of the key's claims (idem.AttemptFrom), across processes
// and restarts: the failure at the last attempt stores
// idem.ErrTooManyAttempts as the key's outcome, so the handler of a key
// runs at most that many times, however many messages fail at once (to run
// it again once its cause is mended, delete the key's record, with idem
// purge, before publishing its dead letter again). A message run unguarded
// (or under a transactional guard, which leaves no count) is counted in the
// consumer's memory. The Guard's Config.MaxAttempts applies too. A busy
// key, a store that cannot be reached and a shutdown are not failures: an
// outage never dead-letters a message.
//
// # Dead letters always fit
//
// A dead letter is the original message (its body, its headers) with the
// headers of this package added ([HeaderReason], [HeaderCause], …). It is
// never larger than the broker takes: the key is copied only up to
// [MaxCopiedKey] bytes (its size and SHA-256 are recorded otherwise), and a
// message that would not fit loses, in this order, its original headers
// over 1 KiB, its body, then its other headers; each part left out is
// recorded by size and SHA-256 ([HeaderBodySize], [HeaderBodySHA256],
// [HeaderCutHeaders], …) so that it can be matched with the original,
// which stays in the broker while its retention lasts.
//
// A dead letter the broker refuses (it answered, and said no: a
// destination that does not exist or may not be written, a message still
// too large for it) is tried MaxAttempts times with a backoff; then the
// consumer gives up on it: it logs the message's coordinates (topic,
// partition and offset; stream and sequence; queue) at error level,
// reports it to its observer, and settles it (Kafka commits past it,
// JetStream terminates it, RabbitMQ rejects it), so one message never
// stops the others for good. A dead-letter destination that cannot be
// reached at all is an outage: the message waits, and is retried without
// end.
//
// # Trace context
//
// A handler's context carries the W3C trace context its message carried
// (traceparent, tracestate and baggage headers): [TraceFrom] returns it as a
// carrier that OpenTelemetry's propagators read
// (propagation.TextMapPropagator.Extract). A Kafka handler's context also
// carries the values of the record's own context (kgo.Record.Context),
// where a kgo hook such as kotel put the consumer span.
package consumer
