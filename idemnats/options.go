package idemnats

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/internal/adapter"
)

// Defaults of the options.
const (
	// DefaultKeyHeader is the header that carries the idempotency key: the
	// one JetStream's own duplicate window reads.
	DefaultKeyHeader = jetstream.MsgIDHeader
	// DefaultBatchSize is how many messages one Fetch asks for.
	DefaultBatchSize = 64
	// DefaultFetchWait is how long one Fetch waits for its batch to fill.
	DefaultFetchWait = 5 * time.Second
	// DefaultBusyDelay is how long a message whose key another consumer
	// holds waits before it is redelivered.
	DefaultBusyDelay = time.Second
	// DefaultRetryDelay is how long a message waits before it is
	// redelivered after a retryable handler error or a store failure.
	DefaultRetryDelay = time.Second
	// DefaultShutdownTimeout is how long running handlers may go on after
	// Run's context ends.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultDeadLetterTimeout bounds the publish of one dead letter.
	DefaultDeadLetterTimeout = 5 * time.Second
)

// Option configures a [Consumer]; see [New].
type Option func(*options)

type options struct {
	adapter.Policy[jetstream.Msg]
	scoped          bool // WithScope or WithSharedScope was given
	key             KeyFunc
	fingerprint     func(jetstream.Msg) []byte
	unkeyed         Unkeyed
	dlqJS           jetstream.JetStream
	dlqSubject      string
	batchSize       int
	fetchWait       time.Duration
	concurrency     int
	busyDelay       time.Duration
	retryDelay      time.Duration
	shutdownTimeout time.Duration
	observer        func(context.Context, Event)
}

// WithKeyHeader takes the idempotency key from the header name. Default
// [DefaultKeyHeader], Nats-Msg-Id. See [HeaderKey] for the values
// accepted.
func WithKeyHeader(name string) Option {
	return func(o *options) {
		if name == "" || strings.ContainsAny(name, ": \t\r\n") {
			o.Fail("WithKeyHeader(%q): not a valid header name", name)
			return
		}
		o.key = HeaderKey(name)
	}
}

// WithKeyFunc takes the idempotency key from f. f returns "" with a nil
// error for a message without a key (see [WithUnkeyed]), and an error for
// one whose key is unusable (it is dead-lettered, [ReasonInvalidKey]).
// Default: [HeaderKey]([DefaultKeyHeader]).
func WithKeyFunc(f KeyFunc) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithKeyFunc(nil)") {
			o.key = f
		}
	}
}

// WithScope sets the function that names the tenant (or publisher, or
// account) a message belongs to, say from a subject token
// ("orders.<tenant>.created") or a header that only trusted publishers can
// set. Keys are scoped by it: two tenants that send the same key get two
// records, so one can never suppress the other's message or see its
// outcome. Either WithScope or [WithSharedScope] is required.
func WithScope(f func(msg jetstream.Msg) string) Option {
	return func(o *options) { o.scoped = true; o.SetScope(f) }
}

// WithSharedScope declares that every publisher on the stream shares one
// key space: a key sent by one is a duplicate of the same key sent by any
// other. Choose it when the publishers trust each other (one service, or
// keys they cannot choose, such as the outbox's). Either [WithScope] or
// WithSharedScope is required.
func WithSharedScope() Option { return func(o *options) { o.scoped = true; o.SetSharedScope() } }

// WithFingerprint sets the bytes of a message the Guard fingerprints: a
// key that comes back with other bytes gets idem.ErrKeyReused and is
// dead-lettered ([ReasonKeyReused]). Default: the data.
func WithFingerprint(f func(msg jetstream.Msg) []byte) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithFingerprint(nil)") {
			o.fingerprint = f
		}
	}
}

// Unkeyed says what the consumer does with a message that has no key.
type Unkeyed uint8

const (
	// DeadLetterUnkeyed dead-letters a message without a key
	// ([ReasonMissingKey]): a consumer that expects keys has a publisher
	// that forgot one. The default.
	DeadLetterUnkeyed Unkeyed = iota
	// RunUnkeyed runs the handler for a message without a key, without
	// idempotency, and acks it once the handler returns nil: JetStream's
	// at-least-once delivery, as without idem.
	RunUnkeyed
)

// WithUnkeyed sets what happens to a message without a key. Default
// [DeadLetterUnkeyed]. A key that is present but unusable ([KeyError], or
// refused by the Guard) is always dead-lettered.
func WithUnkeyed(u Unkeyed) Option {
	return func(o *options) {
		if u != DeadLetterUnkeyed && u != RunUnkeyed {
			o.Fail("WithUnkeyed(%d): not DeadLetterUnkeyed or RunUnkeyed", u)
			return
		}
		o.unkeyed = u
	}
}

// WithDeadLetter publishes every poison message to subject through js
// before it is terminated: the original data and headers (its Nats-*
// headers dropped, its Nats-Msg-Id kept as [MsgIDHeader]) plus the headers
// that say why ([CauseHeader], [ReasonHeader]) and where it came from. The
// subject must belong to a stream: the publish waits for the stream's ack,
// and a message whose dead letter was not stored is redelivered instead of
// terminated. Each dead letter carries a Nats-Msg-Id made of the original's
// stream and sequence, so the dead-letter stream's duplicate window drops
// the copy a redelivery publishes again. Default: poison is terminated
// and logged only.
func WithDeadLetter(js jetstream.JetStream, subject string) Option {
	return func(o *options) {
		if js == nil {
			o.Fail("WithDeadLetter: JetStream is nil")
			return
		}
		if subject == "" || strings.ContainsAny(subject, " \t\r\n*>") {
			o.Fail("WithDeadLetter(%q): not a subject to publish to", subject)
			return
		}
		o.dlqJS, o.dlqSubject = js, subject
	}
}

// WithBatchSize sets how many messages one Fetch asks for. Their keys are
// claimed in one store round trip and their outcomes stored in one (where
// the store can), and their handlers run one after another, in stream
// order; the next batch is fetched while they run. Default
// [DefaultBatchSize]; at least 1. Keep the consumer's MaxAckPending at
// least twice the batch size times the concurrency.
func WithBatchSize(n int) Option {
	return atLeast("WithBatchSize", n, 1, func(o *options) *int { return &o.batchSize })
}

// WithFetchWait sets how long one Fetch waits for its batch to fill; its
// messages are handled as they arrive, and the next Fetch starts when it
// ends. It also bounds how long a stopping Run's hand-backs wait (see
// [WithShutdownTimeout]). Default [DefaultFetchWait]; at least 10ms.
func WithFetchWait(d time.Duration) Option {
	return atLeast("WithFetchWait", d, 10*time.Millisecond, func(o *options) *time.Duration { return &o.fetchWait })
}

// WithConcurrency sets how many fetch loops run at once, each with its
// batches. Handlers of one loop run in order; handlers of different loops
// run in parallel, so order holds per loop only. Default 1; at least 1.
func WithConcurrency(n int) Option {
	return atLeast("WithConcurrency", n, 1, func(o *options) *int { return &o.concurrency })
}

// WithBusyDelay sets how long a message waits before it is redelivered when
// its key is held by another consumer's live lease (the key is in
// progress). Default [DefaultBusyDelay]; at least 0. Each such redelivery
// counts toward the consumer's MaxDeliver.
func WithBusyDelay(d time.Duration) Option {
	return atLeast("WithBusyDelay", d, 0, func(o *options) *time.Duration { return &o.busyDelay })
}

// WithRetryDelay sets how long a message waits before it is redelivered
// after the handler returned an error not marked [idem.Permanent], or the
// store failed. Default [DefaultRetryDelay]; at least 0.
func WithRetryDelay(d time.Duration) Option {
	return atLeast("WithRetryDelay", d, 0, func(o *options) *time.Duration { return &o.retryDelay })
}

// WithShutdownTimeout sets how long the handlers running when Run's
// context ends may go on. Past it their context is cancelled; a handler
// that then returns releases its key, and its message is redelivered.
// Messages fetched but not yet started are handed back: redelivered once
// the Run's pull requests have expired on the server (within the fetch
// wait). Default [DefaultShutdownTimeout]; at least 0.
func WithShutdownTimeout(d time.Duration) Option {
	return atLeast("WithShutdownTimeout", d, 0, func(o *options) *time.Duration { return &o.shutdownTimeout })
}

// WithLogger sets the logger of warnings (dead letters, failed acks, fetch
// errors) and debug lines. Default: the Guard's Config.Logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.SetLogger(l) }
}

// WithObserver sets a function called for every action the consumer takes
// on a delivery, for metrics and tracing. It runs synchronously on the
// delivery's goroutine: keep it fast. The Guard's own steps go to its
// Config.Observer. Default: none.
func WithObserver(f func(ctx context.Context, e Event)) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithObserver(nil)") {
			o.observer = f
		}
	}
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

// defaults sets every option to its default, before the options apply.
func (o *options) defaults() {
	o.key = HeaderKey(DefaultKeyHeader)
	o.batchSize = DefaultBatchSize
	o.fetchWait = DefaultFetchWait
	o.concurrency = 1
	o.busyDelay = DefaultBusyDelay
	o.retryDelay = DefaultRetryDelay
	o.shutdownTimeout = DefaultShutdownTimeout
}
