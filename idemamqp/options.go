package idemamqp

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/internal/chassis"
)

// Defaults of the broker's options.
const (
	// DefaultKeyHeader is the message header that carries the idempotency
	// key.
	DefaultKeyHeader = "idempotency-key"
	// DefaultPrefetch is how many unacknowledged deliveries the broker sends
	// ahead (basic.qos prefetch count).
	DefaultPrefetch = 32
	// DefaultConcurrency is how many handlers run at once, at most the
	// prefetch.
	DefaultConcurrency = 16
	// DefaultReconnectMin and DefaultReconnectMax bound the pause between
	// two attempts to connect; it doubles from the first to the second.
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 10 * time.Second
	// DefaultMaxMessageSize is RabbitMQ's default max_message_size (3.10
	// and later): the largest body the broker takes. See
	// [WithMaxMessageSize].
	DefaultMaxMessageSize = 128 << 20
)

// Option configures a [Consumer]; see [New].
type Option func(*options)

type options struct {
	chassis.Options[amqp.Delivery]
	prefetch     int
	concurrency  int
	delayQueue   *string // nil: the default name
	deadLetter   deadLetterTarget
	reconnectMin time.Duration
	reconnectMax time.Duration
	maxMessage   int
	pubTimeout   time.Duration
	config       amqp.Config
	observer     func(context.Context, Event)
}

type deadLetterTarget struct{ exchange, routingKey string }

// WithScope sets the function that names the tenant or publisher a
// delivery belongs to. Keys are scoped by it: the same key in two scopes
// names two operations, so one tenant's message can never be taken for a
// duplicate of another's. Derive the scope from what the publisher cannot
// forge for another tenant: the user-id property (RabbitMQ checks it
// against the publishing connection's user) or a header your own gateway
// sets. Deliveries scoped "" share one scope. [New] requires WithScope or
// [WithSharedScope].
//
// A panic of f makes the message poison (panicked), its handler unrun.
func WithScope(f func(amqp.Delivery) string) Option {
	return func(o *options) { o.SetScope(f) }
}

// WithSharedScope declares that every publisher of the queue shares one key
// space: that they are trusted not to reuse each other's keys. [New]
// requires WithSharedScope or [WithScope].
func WithSharedScope() Option { return func(o *options) { o.SetSharedScope() } }

// WithKeyHeader takes the idempotency key from the message header name.
// Default [DefaultKeyHeader]. The header's value is a string, or bytes (a
// byte array in the table, which some clients send for strings); a
// delivery without the header has no key, and one whose header is empty
// or of another type has an unusable key (poison: invalid-key).
func WithKeyHeader(name string) Option {
	return func(o *options) { o.SetKeyHeader(name) }
}

// WithKeyFunc takes the idempotency key from f, such as [MessageIDKey].
// f returns "" or consumer.ErrNoKey for a delivery without a key, and
// another error for one whose key cannot be used (it is poison:
// invalid-key). The Guard's Config.MaxKeyLen and Config.ValidateKey apply
// to the key f returns.
//
// A panic of f makes the message poison (panicked), its handler unrun.
func WithKeyFunc(f func(amqp.Delivery) (string, error)) Option {
	return func(o *options) { o.SetKeyFunc(f) }
}

// WithUnkeyedUnguarded runs the handler for a delivery that has no key,
// without idempotency: the broker's at-least-once delivery, as without
// idem. By default such a delivery is poison (missing-key). A key that is
// present but unusable is poison either way.
func WithUnkeyedUnguarded() Option { return func(o *options) { o.SetUnkeyedUnguarded() } }

// WithFingerprint sets the bytes of a delivery the Guard fingerprints: a
// key that comes back with other bytes gets idem.ErrKeyReused and is
// poison (key-reused). Default: the body.
//
// A panic of f makes the message poison (panicked), its handler unrun.
func WithFingerprint(f func(amqp.Delivery) []byte) Option {
	return func(o *options) { o.SetFingerprint(f) }
}

// WithDeadLetter is a poison decision: poison is published to exchange
// with routingKey (the default exchange "" routes to the queue of that
// name), with the mandatory flag and publisher confirms, carrying the
// original's body, headers and properties but user-id, and the headers of
// package consumer (consumer.HeaderReason, consumer.HeaderCause, …) and
// [HeaderQueue], [HeaderExchange] and [HeaderRoutingKey]; then it is acked.
//
// A dead letter always fits: its headers fit the connection's frame size,
// and the whole [WithMaxMessageSize]; what it leaves out to fit is
// recorded by size and SHA-256. A dead letter the broker refuses (a nack,
// an unroutable return, an exchange that does not exist or may not be
// written) is tried again with the retry backoff, WithMaxAttempts times;
// then the consumer gives up on it: it logs the delivery at error level,
// reports [EventDiscarded], and rejects the delivery without requeue (the
// queue's own dead-letter exchange, if it has one, receives it). A broker
// that cannot be reached is an outage: the delivery is never settled
// without its dead letter, and the broker delivers it again.
//
// [New] requires WithDeadLetter or [WithDiscardPoison].
func WithDeadLetter(exchange, routingKey string) Option {
	return func(o *options) {
		if o.Check(len(exchange) <= 255 && len(routingKey) <= 255, "WithDeadLetter(%q, %q): a name longer than 255 bytes", exchange, routingKey) {
			o.deadLetter = deadLetterTarget{exchange, routingKey}
			o.SetDeadLetter()
		}
	}
}

// WithDiscardPoison is a poison decision: poison is logged (warn, with its
// reason and cause), reported as [EventDiscarded], and rejected without
// requeue. RabbitMQ then routes it to the queue's own dead-letter exchange
// (x-dead-letter-exchange, by argument or policy) if it has one, without
// idem's headers, and drops it otherwise.
//
// [New] requires WithDiscardPoison or [WithDeadLetter].
func WithDiscardPoison() Option { return func(o *options) { o.SetDiscardPoison() } }

// WithMaxAttempts sets how many times a handler that fails without a
// permanent mark, or panics, runs for one key before its delivery is
// poison (too-many-attempts). Default consumer.DefaultMaxAttempts (10).
// The count is the store's count of the key's claims (idem.AttemptFrom),
// which holds across consumers and restarts however many deliveries fail
// at once: a failure at the last attempt stores idem.ErrTooManyAttempts as
// the key's outcome, so its later copies are poison without running. A
// claim whose handler did not run counts too. A delivery run unguarded is
// counted in memory (a classic queue keeps no delivery count). It is also
// how many times a dead letter the broker refuses is tried.
func WithMaxAttempts(n int) Option { return func(o *options) { o.SetMaxAttempts(n) } }

// WithRetryBackoff sets how long a delivery is held after its handler
// failed, before it is requeued: first after the first failure, doubling
// with each failure in a row up to longest, with jitter. Defaults 100ms
// and 10s. The same backoff spaces the tries of a refused dead letter.
func WithRetryBackoff(first, longest time.Duration) Option {
	return func(o *options) { o.SetRetryBackoff(first, longest) }
}

// WithBusyDelay sets how long a delivery whose key another consumer holds
// waits before it comes back: the message TTL of the delay queue. Default
// 1s; at least 1ms.
func WithBusyDelay(d time.Duration) Option {
	return func(o *options) {
		if o.Check(d >= time.Millisecond, "WithBusyDelay(%v): must be at least 1ms", d) {
			o.SetBusyDelay(d)
		}
	}
}

// WithDrainTimeout sets how long Run lets running handlers finish after
// its context ends; then their contexts are cancelled, their keys released
// and their deliveries requeued. Default 10s; 0 cancels them at once.
func WithDrainTimeout(d time.Duration) Option {
	return func(o *options) { o.SetDrainTimeout(d) }
}

// WithLogger sets the logger of connection events, poison and failures.
// Default: the Guard's Config.Logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.SetLogger(l) }
}

// WithObserver sets a function called with every [Event] of the consumer:
// connections, and how each delivery was settled. The Guard's own
// Config.Observer sees the claims and outcomes. f runs synchronously on
// the delivery's path: keep it fast. A panic of f is recovered (the first
// one logged at error level): it stops no delivery.
func WithObserver(f func(context.Context, Event)) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithObserver(nil)") {
			o.observer = f
		}
	}
}

// WithPrefetch sets the basic.qos prefetch count: how many unacknowledged
// deliveries the broker sends ahead. Default [DefaultPrefetch]; at least 1
// and at most 65535.
func WithPrefetch(n int) Option {
	return func(o *options) {
		if o.Check(n >= 1 && n <= 65535, "WithPrefetch(%d): must be from 1 to 65535", n) {
			o.prefetch = n
		}
	}
}

// WithConcurrency sets how many handlers run at once. Default
// [DefaultConcurrency], or the prefetch when that is lower; at least 1 and
// at most the prefetch (more would wait for deliveries the broker holds
// back).
//
// Each handler runs on one of as many goroutines taking the deliveries in
// the order amqp091 delivered them, once their keys are claimed (see
// "Claims ahead of the workers" in the package documentation): handlers of
// different deliveries run in parallel and finish in any order, since
// RabbitMQ keeps no per-key order among the deliveries it sends ahead and
// a requeue puts a message behind later ones. With a concurrency of 1 they
// run one after another in delivery order. Whatever the concurrency, the
// Guard keeps a key's handler from running twice at once.
func WithConcurrency(n int) Option {
	return func(o *options) {
		if o.Check(n >= 1, "WithConcurrency(%d): must be at least 1", n) {
			o.concurrency = n
		}
	}
}

// WithDelayQueue names the delay queue of busy deliveries. Default
// [DelayQueueName](queue, busy delay). The consumer declares it (durable,
// message TTL the busy delay, dead-lettering to the queue through the
// default exchange) unless it exists with other arguments, in which case
// it is used as it is. The empty name means no delay queue: a busy
// delivery is held for the busy delay and then requeued, which costs a
// prefetch slot meanwhile and, on a quorum queue, a delivery of its
// x-delivery-limit.
func WithDelayQueue(name string) Option {
	return func(o *options) {
		if o.Check(len(name) <= 255, "WithDelayQueue(%q): longer than 255 bytes", name) {
			o.delayQueue = &name
		}
	}
}

// WithMaxMessageSize sets the largest message body the broker takes: its
// max_message_size, which AMQP does not tell a client. Default
// [DefaultMaxMessageSize], RabbitMQ's own default; set it when the broker
// is configured otherwise. A dead letter is cut to fit it; one the broker
// still refuses as too large is sent again without the original's body
// and headers.
func WithMaxMessageSize(n int) Option {
	return func(o *options) {
		if o.Check(n >= 64<<10, "WithMaxMessageSize(%d): must be at least 64 KiB", n) {
			o.maxMessage = n
		}
	}
}

// WithReconnectBackoff sets the pause between two attempts to connect
// after the connection failed: min at first, doubling up to max, with
// jitter. Defaults [DefaultReconnectMin] and [DefaultReconnectMax].
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(o *options) {
		if o.Check(min > 0 && max >= min, "WithReconnectBackoff(%v, %v): want 0 < min <= max", min, max) {
			o.reconnectMin, o.reconnectMax = min, max
		}
	}
}

// WithConfig sets the connection's configuration (TLS, SASL, heartbeat,
// frame size, client properties, Dial). The consumer names its connection
// after the queue in the client property connection_name unless cfg sets
// one. cfg.Recovery must be nil: the consumer reconnects by itself, with a
// new channel whose delivery tags start again at 1, while amqp091's own
// recovery keeps the channel, so that an ack of a delivery from before a
// reconnect would acknowledge another message.
func WithConfig(cfg amqp.Config) Option {
	return func(o *options) {
		if o.Check(cfg.Recovery == nil, "WithConfig: Config.Recovery is set: the consumer reconnects by itself, "+
			"and amqp091's recovery would let an ack of a delivery from before a reconnect acknowledge another message") {
			o.config = cfg
		}
	}
}

// defaults sets the broker's options to their defaults, before the
// options apply.
func (o *options) defaults() {
	o.prefetch = DefaultPrefetch
	o.reconnectMin = DefaultReconnectMin
	o.reconnectMax = DefaultReconnectMax
	o.maxMessage = DefaultMaxMessageSize
	o.pubTimeout = publishTimeout
}

// check completes the options once they applied, and checks what no one
// option can: the concurrency against the prefetch, the delay queue's
// name.
func (o *options) check(queue string) error {
	if o.concurrency == 0 {
		o.concurrency = min(DefaultConcurrency, o.prefetch)
	}
	if o.delayQueue == nil {
		name := DelayQueueName(queue, o.BusyDelay())
		o.delayQueue = &name
	}
	switch {
	case o.concurrency > o.prefetch:
		return fmt.Errorf("idemamqp: WithConcurrency(%d) is above the prefetch %d: the handlers beyond it would wait for deliveries the broker holds back", o.concurrency, o.prefetch)
	case len(*o.delayQueue) > 255:
		return fmt.Errorf("idemamqp: the delay queue name %q is longer than 255 bytes: use WithDelayQueue", *o.delayQueue)
	}
	return nil
}

// DelayQueueName is the default name of the delay queue of queue's busy
// deliveries: queue + ".idem-delay." + the delay (as time.Duration prints
// it, "1s", "250ms"). The delay is in the name so that consumers deployed
// with different delays each declare their own queue rather than fail on
// the other's arguments.
func DelayQueueName(queue string, delay time.Duration) string {
	return queue + ".idem-delay." + delay.String()
}
