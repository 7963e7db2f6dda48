package idemamqp

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/internal/adapter"
)

// Defaults of the options.
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
	// DefaultBusyDelay is how long a delivery whose key is held by another
	// consumer waits in the delay queue before it comes back.
	DefaultBusyDelay = time.Second
	// DefaultRetryDelay is how long a delivery whose handler failed with a
	// retryable error is held before it is requeued.
	DefaultRetryDelay = time.Second
	// DefaultShutdownTimeout is how long Run lets running handlers finish
	// after its context ends before it cancels theirs.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultReconnectMin and DefaultReconnectMax bound the pause between
	// two attempts to connect; it doubles from the first to the second.
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 10 * time.Second
)

// Option configures a [Consumer]; see [New].
type Option func(*options)

type options struct {
	adapter.Policy[amqp.Delivery]
	scoped          bool // WithScope or WithSharedScope was given
	key             KeyFunc
	fingerprint     func(amqp.Delivery) []byte
	unkeyed         Unkeyed
	prefetch        int
	concurrency     int
	busyDelay       time.Duration
	retryDelay      time.Duration
	delayQueue      *string // nil: the default name
	deadLetter      *deadLetterTarget
	shutdownTimeout time.Duration
	reconnectMin    time.Duration
	reconnectMax    time.Duration
	config          amqp.Config
	observer        func(context.Context, Event)
}

type deadLetterTarget struct{ exchange, routingKey string }

// WithKeyHeader takes the idempotency key from the message header name.
// Default [DefaultKeyHeader]. See [HeaderKey] for the values accepted.
func WithKeyHeader(name string) Option {
	return func(o *options) {
		if name == "" {
			o.Fail("WithKeyHeader(\"\"): the header name is empty")
			return
		}
		o.key = HeaderKey(name)
	}
}

// WithKeyFunc takes the idempotency key from f, such as [MessageIDKey].
// f returns "" with a nil error for a delivery without a key (see
// [WithUnkeyed]), and an error for one whose key is unusable (it is
// dead-lettered). Default: [HeaderKey]([DefaultKeyHeader]).
func WithKeyFunc(f KeyFunc) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithKeyFunc(nil)") {
			o.key = f
		}
	}
}

// WithScope sets the function that names the tenant or publisher a
// delivery belongs to. Keys are scoped by it: the same key in two scopes
// names two operations, so one tenant's message can never be taken for a
// duplicate of another's. Derive the scope from what the publisher cannot
// forge for another tenant: the user-id property (RabbitMQ checks it
// against the publishing connection's user) or a header your own gateway
// sets. Deliveries scoped "" share one scope. [New] requires WithScope or
// [WithSharedScope].
func WithScope(f func(amqp.Delivery) string) Option {
	return func(o *options) { o.scoped = true; o.SetScope(f) }
}

// WithSharedScope declares that every publisher of the queue shares one key
// space: that they are trusted not to reuse each other's keys. [New]
// requires WithSharedScope or [WithScope].
func WithSharedScope() Option { return func(o *options) { o.scoped = true; o.SetSharedScope() } }

// WithFingerprint sets the bytes of a delivery the Guard fingerprints: a
// key that comes back with other bytes gets idem.ErrKeyReused and is
// dead-lettered. Default: the body.
func WithFingerprint(f func(amqp.Delivery) []byte) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithFingerprint(nil)") {
			o.fingerprint = f
		}
	}
}

// Unkeyed says what the consumer does with a delivery that has no key.
type Unkeyed uint8

const (
	// DeadLetterUnkeyed rejects a delivery without a key, without requeue,
	// so that the queue's dead-letter exchange receives it. The default.
	DeadLetterUnkeyed Unkeyed = iota
	// RunUnkeyed runs the handler for a delivery without a key, without
	// idempotency: the broker's at-least-once delivery, as without idem.
	RunUnkeyed
)

// WithUnkeyed sets what happens to a delivery without a key. Default
// [DeadLetterUnkeyed]. A key that is present but unusable (empty, too long,
// refused by the Guard's Config.ValidateKey, of a type that is not a
// string) is always dead-lettered.
func WithUnkeyed(u Unkeyed) Option {
	return func(o *options) {
		if u != DeadLetterUnkeyed && u != RunUnkeyed {
			o.Fail("WithUnkeyed(%d): not DeadLetterUnkeyed or RunUnkeyed", u)
			return
		}
		o.unkeyed = u
	}
}

// WithPrefetch sets the basic.qos prefetch count: how many unacknowledged
// deliveries the broker sends ahead. Default [DefaultPrefetch]; at least 1
// and at most 65535.
func WithPrefetch(n int) Option {
	return func(o *options) {
		if n < 1 || n > 65535 {
			o.Fail("WithPrefetch(%d): must be from 1 to 65535", n)
			return
		}
		o.prefetch = n
	}
}

// WithConcurrency sets how many handlers run at once. Default
// [DefaultConcurrency], or the prefetch when that is lower; at least 1 and
// at most the prefetch (more would wait for deliveries the broker holds
// back).
//
// Each handler runs on one of as many goroutines reading amqp091's
// delivery channel, as a bare consumer's would: handlers of different
// deliveries run in parallel and finish in any order, since RabbitMQ keeps
// no per-key order among the deliveries it sends ahead and a requeue puts
// a message behind later ones. With a concurrency of 1 they run one after
// another in delivery order. Whatever the concurrency, the Guard keeps a
// key's handler from running twice at once.
func WithConcurrency(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.Fail("WithConcurrency(%d): must be at least 1", n)
			return
		}
		o.concurrency = n
	}
}

// WithBusyDelay sets how long a delivery whose key another consumer holds
// waits before it comes back: the message TTL of the delay queue. Default
// [DefaultBusyDelay]; at least 1ms.
func WithBusyDelay(d time.Duration) Option {
	return func(o *options) {
		if d < time.Millisecond {
			o.Fail("WithBusyDelay(%v): must be at least 1ms", d)
			return
		}
		o.busyDelay = d
	}
}

// WithRetryDelay sets how long a delivery is held after its handler failed
// with a retryable error, before it is requeued. Default
// [DefaultRetryDelay]; 0 requeues at once.
func WithRetryDelay(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.Fail("WithRetryDelay(%v): must not be negative", d)
			return
		}
		o.retryDelay = d
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
		if len(name) > 255 {
			o.Fail("WithDelayQueue(%q): longer than 255 bytes", name)
			return
		}
		o.delayQueue = &name
	}
}

// WithDeadLetter publishes dead-lettered deliveries to exchange with
// routingKey, with the cause in the header [CauseHeader] and the queue in
// [QueueHeader], and acks them once the broker confirmed the publish.
// Default: they are rejected without requeue, and the queue's own
// dead-letter exchange (x-dead-letter-exchange), if it has one, receives
// them without the cause.
func WithDeadLetter(exchange, routingKey string) Option {
	return func(o *options) { o.deadLetter = &deadLetterTarget{exchange, routingKey} }
}

// WithShutdownTimeout sets how long Run lets running handlers finish after
// its context ends; then their contexts are cancelled, their keys released
// and their deliveries requeued. Default [DefaultShutdownTimeout]; 0
// cancels them at once.
func WithShutdownTimeout(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.Fail("WithShutdownTimeout(%v): must not be negative", d)
			return
		}
		o.shutdownTimeout = d
	}
}

// WithReconnectBackoff sets the pause between two attempts to connect
// after the connection failed: min at first, doubling up to max, with
// jitter. Defaults [DefaultReconnectMin] and [DefaultReconnectMax].
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(o *options) {
		if min <= 0 || max < min {
			o.Fail("WithReconnectBackoff(%v, %v): want 0 < min <= max", min, max)
			return
		}
		o.reconnectMin, o.reconnectMax = min, max
	}
}

// WithConfig sets the connection's configuration (TLS, SASL, heartbeat,
// client properties, Dial). The consumer names its connection after the
// queue in the client property connection_name unless cfg sets one.
// cfg.Recovery must be nil: the consumer reconnects by itself, with a new
// channel whose delivery tags start again at 1, while amqp091's own
// recovery keeps the channel, so that an ack of a delivery from before a
// reconnect would acknowledge another message.
func WithConfig(cfg amqp.Config) Option {
	return func(o *options) {
		if cfg.Recovery != nil {
			o.Fail("WithConfig: Config.Recovery is set: the consumer reconnects by itself, and amqp091's recovery would let an ack of a delivery from before a reconnect acknowledge another message")
			return
		}
		o.config = cfg
	}
}

// WithLogger sets the logger of connection events, dead-letters and
// failures. Default: the Guard's Config.Logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.SetLogger(l) }
}

// WithObserver sets a function called with every [Event] of the consumer:
// connections, and how each delivery was settled. The Guard's own
// Config.Observer sees the claims and outcomes. f runs synchronously on
// the delivery's path: keep it fast.
func WithObserver(f func(context.Context, Event)) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithObserver(nil)") {
			o.observer = f
		}
	}
}

// defaults sets every option to its default, before the options apply.
func (o *options) defaults() {
	o.key = HeaderKey(DefaultKeyHeader)
	o.prefetch = DefaultPrefetch
	o.busyDelay = DefaultBusyDelay
	o.retryDelay = DefaultRetryDelay
	o.shutdownTimeout = DefaultShutdownTimeout
	o.reconnectMin = DefaultReconnectMin
	o.reconnectMax = DefaultReconnectMax
}

// check completes the options once they applied, and checks what no one
// option can: the concurrency against the prefetch, the delay queue's
// name.
func (o *options) check(queue string) error {
	if o.concurrency == 0 {
		o.concurrency = min(DefaultConcurrency, o.prefetch)
	}
	if o.delayQueue == nil {
		name := DelayQueueName(queue, o.busyDelay)
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
