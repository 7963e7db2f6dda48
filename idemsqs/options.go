package idemsqs

import (
	"context"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem/internal/chassis"
)

// Defaults of the broker's options. The options every idem consumer shares
// have the same defaults in all of them (see each option).
const (
	// DefaultKeyHeader is the message attribute that carries the
	// idempotency key.
	DefaultKeyHeader = "idempotency-key"
	// DefaultConcurrency is how many handlers run at once.
	DefaultConcurrency = 16
	// DefaultWaitTime is how long one ReceiveMessage waits for messages
	// (its long poll): SQS's longest.
	DefaultWaitTime = 20 * time.Second
)

// maxReceive is the most messages one ReceiveMessage returns, and one
// batch call (DeleteMessageBatch, ChangeMessageVisibilityBatch) takes.
const maxReceive = 10

// maxVisibility is SQS's longest visibility timeout: 12 hours.
const maxVisibility = 12 * time.Hour

// Option configures a [Consumer]; see [New].
type Option func(*options)

type options struct {
	chassis.Options[types.Message]
	deadLetter  string // the dead-letter queue's URL
	redrive     bool   // poison is left to the queue's redrive policy
	concurrency int
	waitTime    time.Duration
	visibility  time.Duration // 0: the queue's own
	observer    func(context.Context, Event)
}

// WithScope sets the function that names the tenant or publisher a
// message belongs to, say from a message attribute that only your own
// gateway sets, or the SenderId system attribute (the AWS account or
// principal that sent it, which SQS sets). Keys are scoped by it: the same
// key in two scopes names two operations, so one tenant's message can
// never be taken for a duplicate of another's. [New] requires WithScope or
// [WithSharedScope].
func WithScope(f func(m types.Message) string) Option {
	return func(o *options) { o.SetScope(f) }
}

// WithSharedScope declares that every publisher of the queue shares one key
// space: that they are trusted not to reuse each other's keys. [New]
// requires WithSharedScope or [WithScope].
func WithSharedScope() Option { return func(o *options) { o.SetSharedScope() } }

// WithKeyHeader takes the idempotency key from the message attribute name
// (SQS's headers; case-sensitive). Default [DefaultKeyHeader]. The
// attribute is a String, a Number or a Binary one (its bytes as the key);
// a message without it has no key, and one whose value is empty has an
// unusable key (poison: invalid-key).
func WithKeyHeader(name string) Option {
	return func(o *options) { o.SetKeyHeader(name) }
}

// WithKeyFunc takes the idempotency key from f, such as
// [DeduplicationIDKey] on a FIFO queue. f returns "" or consumer.ErrNoKey
// for a message without a key, and another error for one whose key cannot
// be used (it is poison: invalid-key). The Guard's Config.MaxKeyLen and
// Config.ValidateKey apply to the key f returns.
func WithKeyFunc(f func(m types.Message) (string, error)) Option {
	return func(o *options) { o.SetKeyFunc(f) }
}

// WithUnkeyedUnguarded runs the handler for a message that has no key,
// without idempotency: SQS's at-least-once delivery, as without idem. By
// default such a message is poison (missing-key). A key that is present
// but unusable is poison either way.
func WithUnkeyedUnguarded() Option { return func(o *options) { o.SetUnkeyedUnguarded() } }

// WithFingerprint sets the bytes of a message the Guard fingerprints: a
// key that comes back with other bytes gets idem.ErrKeyReused and is
// poison (key-reused). Default: the body.
func WithFingerprint(f func(m types.Message) []byte) Option {
	return func(o *options) { o.SetFingerprint(f) }
}

// WithDeadLetter is a poison decision: poison is sent to the queue of
// queueURL (SendMessage), carrying the original's body and message
// attributes and the attributes of package consumer
// (consumer.HeaderReason, consumer.HeaderCause, …), [HeaderQueue] and
// [HeaderMessageID]; then it is deleted. On a FIFO dead-letter queue the
// letter keeps the original's message group (or [DeadLetterGroup]) and is
// deduplicated by the original's message id.
//
// A dead letter always fits SQS: at most 10 message attributes, the whole
// within the dead-letter queue's MaximumMessageSize; what it leaves out to
// fit is recorded (by size and SHA-256 for the body, by name for
// attributes), and a body left out is [BodyLeftOut], since SQS takes no
// empty body. [Consumer.Run] fails at once, naming the queue, when the
// dead-letter queue cannot be read (it does not exist, or may not be
// read). A dead letter SQS refuses later (the queue deleted meanwhile) is
// tried again with the retry backoff, WithMaxAttempts times; then the
// consumer gives up on it: it logs the message at error level, reports
// [EventDiscarded], and leaves the message to the queue's redrive policy
// if it has one (visible again), or deletes it. An SQS that cannot be
// reached is an outage: the message is never deleted without its dead
// letter, and comes back once its visibility timeout ends.
//
// [New] requires one poison decision: WithDeadLetter, [WithRedrivePolicy]
// or [WithDiscardPoison].
func WithDeadLetter(queueURL string) Option {
	return func(o *options) {
		if o.Check(queueURL != "", "WithDeadLetter(%q): the queue URL is empty", queueURL) {
			o.deadLetter = queueURL
			o.SetDeadLetter()
		}
	}
}

// WithRedrivePolicy is a poison decision: poison is left to the queue's
// own redrive policy. The consumer does not delete it: it makes it visible
// again after the retry backoff, and SQS moves it to the policy's
// dead-letter queue once it was received maxReceiveCount times, without
// idem's attributes (the consumer logs its reason and cause at warn
// level, and reports [EventRedriven]). A stored permanent failure is
// replayed, not run again, at each of those receives. [Consumer.Run]
// fails when the queue has no redrive policy.
//
// [New] requires one poison decision: WithRedrivePolicy,
// [WithDeadLetter] or [WithDiscardPoison].
func WithRedrivePolicy() Option {
	return func(o *options) {
		o.redrive = true
		o.SetDeadLetter()
	}
}

// WithDiscardPoison is a poison decision: poison is logged (warn, with its
// reason and cause), reported as [EventDiscarded], and deleted. It never
// reaches the queue's redrive policy.
//
// [New] requires one poison decision: WithDiscardPoison,
// [WithDeadLetter] or [WithRedrivePolicy].
func WithDiscardPoison() Option { return func(o *options) { o.SetDiscardPoison() } }

// WithMaxAttempts sets how many times a handler that fails without a
// permanent mark, or panics, runs for one key before its message is
// poison (too-many-attempts). Default consumer.DefaultMaxAttempts (10).
// The count is this consumer's, in memory, by scope and key (SQS's
// ApproximateReceiveCount also counts the receives of a busy key and of
// an outage); the Guard's Config.MaxAttempts, kept in the store, counts
// across consumers and restarts and applies too, as does the queue's
// redrive policy. It is also how many times a dead letter SQS refuses is
// tried.
func WithMaxAttempts(n int) Option { return func(o *options) { o.SetMaxAttempts(n) } }

// WithRetryBackoff sets how long a message stays invisible after its
// handler failed: first after the first failure, doubling with each
// failure in a row up to longest, with jitter. Defaults 100ms and 10s. A
// pause of a second or more is SQS's visibility timeout (in whole
// seconds, rounded up); a shorter one is held by the consumer, the message
// kept invisible, before it is made visible. The same backoff spaces the
// tries of a refused dead letter.
func WithRetryBackoff(first, longest time.Duration) Option {
	return func(o *options) { o.SetRetryBackoff(first, longest) }
}

// WithBusyDelay sets how long a message whose key another consumer holds
// stays invisible before it comes back (ChangeMessageVisibility; held by
// the consumer when shorter than a second, as for [WithRetryBackoff]).
// Default 1s.
func WithBusyDelay(d time.Duration) Option {
	return func(o *options) { o.SetBusyDelay(d) }
}

// WithDrainTimeout sets how long Run lets running handlers finish after
// its context ends; then their contexts are cancelled, their keys released
// and their messages made visible again. Default 10s; 0 cancels them at
// once.
func WithDrainTimeout(d time.Duration) Option {
	return func(o *options) { o.SetDrainTimeout(d) }
}

// WithLogger sets the logger of receive failures, poison and failures.
// Default: the Guard's Config.Logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.SetLogger(l) }
}

// WithObserver sets a function called with every [Event] of the consumer:
// its start, receive failures, and how each message was settled. The
// Guard's own Config.Observer sees the claims and outcomes. f runs
// synchronously on the message's path: keep it fast.
func WithObserver(f func(ctx context.Context, e Event)) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithObserver(nil)") {
			o.observer = f
		}
	}
}

// WithConcurrency sets how many handlers run at once. Default
// [DefaultConcurrency]; at least 1. A ReceiveMessage asks for as many
// messages as handlers are free, at most 10. On a FIFO queue, the
// messages of one message group run one after another, in order, whatever
// the concurrency.
func WithConcurrency(n int) Option {
	return func(o *options) {
		if o.Check(n >= 1, "WithConcurrency(%d): must be at least 1", n) {
			o.concurrency = n
		}
	}
}

// WithWaitTime sets how long one ReceiveMessage waits for messages (its
// long poll). Default [DefaultWaitTime]; from 1s to 20s, in whole seconds.
func WithWaitTime(d time.Duration) Option {
	return func(o *options) {
		if o.Check(d >= time.Second && d <= 20*time.Second && d%time.Second == 0,
			"WithWaitTime(%v): must be whole seconds from 1s to 20s", d) {
			o.waitTime = d
		}
	}
}

// WithVisibilityTimeout sets the visibility timeout the consumer receives
// messages with and keeps renewing while they are held. Default: the
// queue's own VisibilityTimeout, read when Run starts. From 1s to 12h, in
// whole seconds. The consumer renews it every third of it, so a message
// still being worked on is never redelivered while the consumer runs; a
// shorter timeout costs more ChangeMessageVisibilityBatch calls and brings
// a crashed consumer's messages back sooner.
func WithVisibilityTimeout(d time.Duration) Option {
	return func(o *options) {
		if o.Check(d >= time.Second && d <= maxVisibility && d%time.Second == 0,
			"WithVisibilityTimeout(%v): must be whole seconds from 1s to 12h", d) {
			o.visibility = d
		}
	}
}

// defaults sets the broker's options to their defaults, before the
// options apply.
func (o *options) defaults() {
	o.concurrency = DefaultConcurrency
	o.waitTime = DefaultWaitTime
}
