package idemkafka

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/idemkafka/internal/consume"
)

// Defaults of the options.
const (
	// DefaultKeyHeader is the record header that carries the idempotency key.
	DefaultKeyHeader = consume.DefaultKeyHeader
	// DefaultMaxBatch is the most records of a partition claimed and
	// completed together.
	DefaultMaxBatch = consume.DefaultMaxBatch
	// DefaultCommitInterval is the time between offset commits.
	DefaultCommitInterval = consume.DefaultCommitInterval
	// DefaultDrainTimeout is how long handlers in flight may take to
	// finish at a shutdown, and to return once cancelled at a revoke.
	DefaultDrainTimeout = consume.DefaultDrainTimeout
	// DeadLetterSuffix is appended to a record's topic to name its default
	// dead-letter topic.
	DeadLetterSuffix = consume.DeadLetterSuffix
)

// Option configures a [Consumer]; see [New]. The options are shared with
// the exactly-once mode (kafkapg).
type Option func(*consume.Options)

// WithScope sets the scope of each record's key: the tenant or producer
// it belongs to, read from a header or the topic. The same key in two
// scopes names two operations. New requires WithScope or [WithSharedScope].
func WithScope(scope func(r *kgo.Record) string) Option {
	return func(o *consume.Options) {
		if scope == nil {
			o.Failf("WithScope(nil)")
			return
		}
		o.Scope = scope
	}
}

// WithSharedScope puts every record's key in one scope: one key names one
// operation, whoever produced the record. Choose it when keys are unique
// across producers (an order ID the system itself assigns); otherwise use
// [WithScope]. New requires one of them.
func WithSharedScope() Option { return func(o *consume.Options) { o.SharedScope = true } }

// WithKeyHeader sets the record header that carries the idempotency key.
// Default [DefaultKeyHeader]. A record without it, or with an empty one,
// is dead-lettered (see [WithUnkeyedUnguarded]); one with the header twice
// with different values too.
func WithKeyHeader(name string) Option {
	return func(o *consume.Options) {
		if name == "" {
			o.Failf("WithKeyHeader(%q): empty", name)
			return
		}
		o.KeyHeader = name
	}
}

// WithKeyFunc takes the key from f instead of a header: the record's key,
// a field of its payload. f returns [ErrNoKey] (or "") for a record
// without one; any other error makes the record undecodable. Either way
// the record is dead-lettered (see [WithUnkeyedUnguarded] for ErrNoKey).
func WithKeyFunc(f func(r *kgo.Record) (string, error)) Option {
	return func(o *consume.Options) {
		if f == nil {
			o.Failf("WithKeyFunc(nil)")
			return
		}
		o.KeyFunc = f
	}
}

// WithRecordKey takes the idempotency key from the record's key: for
// producers that key each record by its unique event or order ID.
func WithRecordKey() Option {
	return WithKeyFunc(func(r *kgo.Record) (string, error) { return string(r.Key), nil })
}

// WithUnkeyedUnguarded runs the handler for records without a key, once per
// delivery and without idempotency, instead of dead-lettering them.
func WithUnkeyedUnguarded() Option { return func(o *consume.Options) { o.Unkeyed = true } }

// WithPayload sets what is fingerprinted for a record: the same key with
// another payload is a key reused, dead-lettered. Default: the record's
// value.
func WithPayload(f func(r *kgo.Record) []byte) Option {
	return func(o *consume.Options) {
		if f == nil {
			o.Failf("WithPayload(nil)")
			return
		}
		o.Payload = f
	}
}

// WithDeadLetterTopic sets the topic that records which can never succeed
// go to. Default: the record's topic followed by [DeadLetterSuffix].
func WithDeadLetterTopic(topic string) Option {
	return func(o *consume.Options) {
		if topic == "" {
			o.Failf("WithDeadLetterTopic(%q): empty", topic)
			return
		}
		o.DeadLetterTopic = func(*kgo.Record) string { return topic }
	}
}

// WithDeadLetterClient produces dead letters with cl instead of the
// consuming client.
func WithDeadLetterClient(cl *kgo.Client) Option {
	return func(o *consume.Options) {
		if cl == nil {
			o.Failf("WithDeadLetterClient(nil)")
			return
		}
		o.DeadLetterClient = cl
	}
}

// WithMaxBatch sets the most records of a partition handled together:
// claimed in one round trip and completed in one. Default
// [DefaultMaxBatch]; at least 1. A partition whose worker has that many
// records waiting is paused until it catches up.
func WithMaxBatch(n int) Option {
	return func(o *consume.Options) {
		if n < 1 {
			o.Failf("WithMaxBatch(%d): must be at least 1", n)
			return
		}
		o.MaxBatch = n
	}
}

// WithCommitInterval sets how often finished offsets are committed to
// Kafka. They are also committed when a partition is revoked and at
// shutdown. Default [DefaultCommitInterval].
func WithCommitInterval(d time.Duration) Option {
	return positive("WithCommitInterval", d, func(o *consume.Options) { o.CommitInterval = d })
}

// WithDrainTimeout sets how long, at shutdown, handlers in flight may take
// to finish before their context is cancelled, and how long cancelled
// handlers may take to return, at shutdown or when their partition is
// revoked. Default [DefaultDrainTimeout]; keep it under the group's
// rebalance timeout.
func WithDrainTimeout(d time.Duration) Option {
	return positive("WithDrainTimeout", d, func(o *consume.Options) { o.DrainTimeout = d })
}

// positive is an option that sets a duration, which must be positive.
func positive(name string, d time.Duration, set func(*consume.Options)) Option {
	return func(o *consume.Options) {
		if d <= 0 {
			o.Failf("%s(%v): must be positive", name, d)
			return
		}
		set(o)
	}
}

// WithRetryBackoff sets the pauses before a record that could not be
// finished (busy key, store down, retryable error) is tried again: first,
// doubling up to longest, with jitter. Default 10ms to 5s.
func WithRetryBackoff(first, longest time.Duration) Option {
	return func(o *consume.Options) {
		if first <= 0 || longest <= 0 {
			o.Failf("WithRetryBackoff(%v, %v): must be positive", first, longest)
			return
		}
		o.MinBackoff, o.MaxBackoff = first, longest
	}
}

// WithLogger sets the logger of the consumer's warnings (retries, dead
// letters, commit failures) and info lines (assignments). Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(o *consume.Options) {
		if l == nil {
			o.Failf("WithLogger(nil)")
			return
		}
		o.Logger = l
	}
}

// WithObserver sets a function called with every [Event]: batches
// finished with the partition's lag, retries, dead letters, commits and
// rebalances. It runs on the consumer's goroutines: keep it fast. The
// Guard's own Observer (idem.Config) sees every claim and outcome.
func WithObserver(f func(ctx context.Context, e Event)) Option {
	return func(o *consume.Options) {
		if f == nil {
			o.Failf("WithObserver(nil)")
			return
		}
		o.Observer = f
	}
}
