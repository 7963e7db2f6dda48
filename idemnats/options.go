package idemnats

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/internal/chassis"
)

// Defaults of the broker's options. The options every idem consumer shares
// have the same defaults in all of them (see each option).
const (
	// DefaultKeyHeader is the header that carries the idempotency key: the
	// one JetStream's own duplicate window reads.
	DefaultKeyHeader = jetstream.MsgIDHeader
	// DefaultBatchSize is how many messages one Fetch asks for.
	DefaultBatchSize = 64
	// DefaultFetchWait is how long one Fetch waits for its batch to fill.
	DefaultFetchWait = 5 * time.Second
)

// Option configures a [Consumer]; see [New].
type Option func(*options)

type options struct {
	chassis.Options[jetstream.Msg]
	dlqJS       jetstream.JetStream
	dlqSubject  string
	batchSize   int
	fetchWait   time.Duration
	concurrency int
	observer    func(context.Context, Event)
}

// WithScope sets the function that names the tenant (or publisher, or
// account) a message belongs to, say from a subject token
// ("orders.<tenant>.created") or a header that only trusted publishers can
// set. Keys are scoped by it: two tenants that send the same key get two
// records, so one can never suppress the other's message or see its
// outcome. [New] requires WithScope or [WithSharedScope].
//
// A panic of f makes the message poison (panicked), its handler unrun.
func WithScope(f func(msg jetstream.Msg) string) Option {
	return func(o *options) { o.SetScope(f) }
}

// WithSharedScope declares that every publisher on the stream shares one
// key space: a key sent by one is a duplicate of the same key sent by any
// other. Choose it when the publishers trust each other (one service, or
// keys they cannot choose, such as the outbox's). [New] requires
// WithSharedScope or [WithScope].
func WithSharedScope() Option { return func(o *options) { o.SetSharedScope() } }

// WithKeyHeader takes the idempotency key from the header name
// (case-sensitive, as NATS headers are). Default [DefaultKeyHeader],
// Nats-Msg-Id. A message without the header has no key; one whose header
// is empty, or sent more than once, has an unusable key (poison:
// invalid-key).
func WithKeyHeader(name string) Option {
	return func(o *options) { o.SetKeyHeader(name) }
}

// WithKeyFunc takes the idempotency key from f. f returns "" or
// consumer.ErrNoKey for a message without a key, and another error for one
// whose key cannot be used (it is poison: invalid-key). The Guard's
// Config.MaxKeyLen and Config.ValidateKey apply to the key f returns. f
// must not keep msg.
//
// A panic of f makes the message poison (panicked), its handler unrun.
func WithKeyFunc(f func(msg jetstream.Msg) (string, error)) Option {
	return func(o *options) { o.SetKeyFunc(f) }
}

// WithUnkeyedUnguarded runs the handler for a message that has no key,
// without idempotency, and acks it once the handler returns nil:
// JetStream's at-least-once delivery, as without idem. By default such a
// message is poison (missing-key). A key that is present but unusable is
// poison either way.
func WithUnkeyedUnguarded() Option { return func(o *options) { o.SetUnkeyedUnguarded() } }

// WithFingerprint sets the bytes of a message the Guard fingerprints: a
// key that comes back with other bytes gets idem.ErrKeyReused and is
// poison (key-reused). Default: the data.
//
// A panic of f makes the message poison (panicked), its handler unrun.
func WithFingerprint(f func(msg jetstream.Msg) []byte) Option {
	return func(o *options) { o.SetFingerprint(f) }
}

// WithDeadLetter is a poison decision: poison is published to subject
// through js, and terminated once the stream that takes the subject
// stored it. The dead letter carries the original's data and headers (its
// Nats-* headers left out, its Nats-Msg-Id kept as [HeaderMsgID]), the
// headers of package consumer (consumer.HeaderReason,
// consumer.HeaderCause, consumer.HeaderKey, …) and where it came from
// ([HeaderStream], [HeaderSubject], [HeaderSequence], [HeaderDelivered]).
// It is published with a Nats-Msg-Id made of the original's stream and
// sequence, so that the dead-letter stream's duplicate window drops the
// copy a redelivery publishes again.
//
// A dead letter always fits: it is cut to the max_payload of js's
// connection (1 MiB unless the server says otherwise), and what it leaves
// out to fit is recorded by size and SHA-256; one that the stream refuses
// as larger than its max_msg_size is sent again without the original's
// data and headers. A dead letter the broker refuses (no stream takes the
// subject, the stream or the account refuses it, it is too large even
// then) is tried again with the retry backoff, WithMaxAttempts times in
// all; then the consumer gives up on it: it logs the message's stream and
// sequence at error level, reports [EventDiscarded], and terminates the
// message. A dead letter that cannot reach the server (the connection
// down or closed, no answer within 5 s) is an outage: the message is held,
// and the publish tried again, without end.
//
// [New] requires WithDeadLetter or [WithDiscardPoison].
func WithDeadLetter(js jetstream.JetStream, subject string) Option {
	return func(o *options) {
		switch {
		case js == nil:
			o.Fail("WithDeadLetter: JetStream is nil")
		case subject == "" || strings.ContainsAny(subject, " \t\r\n*>"):
			o.Fail("WithDeadLetter(%q): not a subject to publish to", subject)
		default:
			o.dlqJS, o.dlqSubject = js, subject
			o.SetDeadLetter()
		}
	}
}

// WithDiscardPoison is a poison decision: poison is logged (warn, with its
// reason and cause), reported as [EventDiscarded], and terminated, without
// a dead letter. It stays in the stream while the stream's retention keeps
// it.
//
// [New] requires WithDiscardPoison or [WithDeadLetter].
func WithDiscardPoison() Option { return func(o *options) { o.SetDiscardPoison() } }

// WithMaxAttempts sets how many times a handler that fails without a
// permanent mark, or panics, runs for one key before its message is
// poison (too-many-attempts). Default consumer.DefaultMaxAttempts (10).
// The count is the store's count of the key's claims (idem.AttemptFrom),
// which holds across consumers and restarts however many messages fail at
// once: a failure at the last attempt stores idem.ErrTooManyAttempts as
// the key's outcome, so its later copies are poison without running. A
// claim whose handler did not run (its batch stopped by an outage or a
// shutdown) counts too. A message run unguarded is counted in memory, by
// its stream and sequence (JetStream's NumDelivered counts every Nak, those
// of a busy key and of a store outage too). It is also how many times a
// dead letter the broker refuses is tried.
func WithMaxAttempts(n int) Option { return func(o *options) { o.SetMaxAttempts(n) } }

// WithRetryBackoff sets the NakWithDelay of a message whose handler
// failed: first after the first failure, doubling with each failure in a
// row up to longest, with jitter. Defaults 100ms and 10s. The same
// backoff spaces a message's redeliveries after a store outage, and the
// tries of a dead letter.
func WithRetryBackoff(first, longest time.Duration) Option {
	return func(o *options) { o.SetRetryBackoff(first, longest) }
}

// WithBusyDelay sets the NakWithDelay of a message whose key is held by
// another consumer's live lease (the key is in progress). Default 1s.
// Each such redelivery counts toward the JetStream consumer's MaxDeliver,
// though not toward WithMaxAttempts.
func WithBusyDelay(d time.Duration) Option {
	return func(o *options) { o.SetBusyDelay(d) }
}

// WithDrainTimeout sets how long the handlers running when Run's context
// ends may go on. Past it their context is cancelled; a handler that then
// returns releases its key, and its message is redelivered. Messages
// fetched but not yet started are handed back: redelivered once the Run's
// pull requests have expired on the server (within the fetch wait).
// Default 10s; 0 cancels them at once.
func WithDrainTimeout(d time.Duration) Option {
	return func(o *options) { o.SetDrainTimeout(d) }
}

// WithLogger sets the logger of poison, retries, failed acks and fetches
// (Warn), panics and dead letters given up on (Error). Default: the
// Guard's Config.Logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.SetLogger(l) }
}

// WithObserver sets a function called for every action the consumer takes
// on a delivery, for metrics and tracing. It runs synchronously on the
// delivery's goroutine: keep it fast. The Guard's own steps go to its
// Config.Observer. A panic of f is recovered (the first one logged at
// error level): it stops no message. Default: none.
func WithObserver(f func(ctx context.Context, e Event)) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithObserver(nil)") {
			o.observer = f
		}
	}
}

// WithBatchSize sets how many messages one Fetch asks for. Their keys are
// claimed in one store round trip and their outcomes stored in one (where
// the store can), and their handlers run one after another, in stream
// order; the next batch is fetched while they run. Default
// [DefaultBatchSize]; at least 1. Keep the consumer's MaxAckPending at
// least three times the batch size times the concurrency.
func WithBatchSize(n int) Option {
	return atLeast("WithBatchSize", n, 1, func(o *options) *int { return &o.batchSize })
}

// WithFetchWait sets how long one Fetch waits for its batch to fill; its
// messages are handled as they arrive, and the next Fetch starts when it
// ends. It also bounds how long a stopping Run's hand-backs wait (see
// [WithDrainTimeout]). Default [DefaultFetchWait]; at least 10ms.
func WithFetchWait(d time.Duration) Option {
	return atLeast("WithFetchWait", d, 10*time.Millisecond, func(o *options) *time.Duration { return &o.fetchWait })
}

// WithConcurrency sets how many fetch loops run at once, each with its
// batches. Handlers of one loop run in order; handlers of different loops
// run in parallel, so order holds per loop only. Default 1; at least 1.
func WithConcurrency(n int) Option {
	return atLeast("WithConcurrency", n, 1, func(o *options) *int { return &o.concurrency })
}

// atLeast is an Option that sets the field of o that field returns to v,
// refusing a v below least.
func atLeast[T int | time.Duration](name string, v, least T, field func(*options) *T) Option {
	return func(o *options) {
		if v < least {
			o.Fail("%s(%v): must be at least %v", name, v, least)
			return
		}
		*field(o) = v
	}
}

// defaults sets the broker's options to their defaults, before the
// options apply.
func (o *options) defaults() {
	o.batchSize = DefaultBatchSize
	o.fetchWait = DefaultFetchWait
	o.concurrency = 1
}

// validHeaderName reports whether name can name a NATS header.
func validHeaderName(name string) bool { return !strings.ContainsAny(name, ": \t\r\n") }
