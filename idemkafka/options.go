package idemkafka

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/idemkafka/internal/consume"
)

// Defaults of Kafka's options. The defaults of the options every idem
// consumer has are in their doc comments.
const (
	// DefaultKeyHeader is the record header that carries the idempotency key.
	DefaultKeyHeader = consume.DefaultKeyHeader // "idempotency-key"
	// DefaultMaxBatch is the most records of a partition claimed and
	// completed together.
	DefaultMaxBatch = consume.DefaultMaxBatch // 500
	// DefaultCommitInterval is the time between offset commits.
	DefaultCommitInterval = consume.DefaultCommitInterval // 1s
)

// Option configures a [Consumer]; see [New]. The options are shared with
// the exactly-once mode (kafkapg's WithConsumerOptions).
type Option func(*consume.Options)

// WithScope sets the scope of each record's key: the tenant or producer
// it belongs to, read from a header or the topic. The same key in two
// scopes names two operations. Derive it from what a producer cannot forge
// for another tenant (a topic per tenant, a header your own gateway sets).
// [New] requires WithScope or [WithSharedScope].
//
// A panic of f makes the record poison (panicked), its handler unrun.
func WithScope(scope func(r *kgo.Record) string) Option {
	return func(o *consume.Options) { o.SetScope(scope) }
}

// WithSharedScope puts every record's key in one scope: one key names one
// operation, whoever produced the record. Choose it when keys are unique
// across producers (an order ID the system itself assigns); otherwise use
// [WithScope]. [New] requires one of them.
func WithSharedScope() Option { return func(o *consume.Options) { o.SetSharedScope() } }

// WithKeyHeader takes the idempotency key from the record header name.
// Default [DefaultKeyHeader]. A record without the header has no key
// (poison: missing-key, unless [WithUnkeyedUnguarded]); one whose header
// is empty, is there twice, or is longer than the Guard's
// Config.MaxKeyLen has an unusable key (poison: invalid-key).
func WithKeyHeader(name string) Option {
	return func(o *consume.Options) { o.SetKeyHeader(name) }
}

// WithKeyFunc takes the idempotency key from f instead of a header: the
// record's key ([WithRecordKey]), a field of its value. f returns "" or
// consumer.ErrNoKey for a record without a key, and another error for one
// whose key cannot be used (poison: invalid-key). The Guard's
// Config.MaxKeyLen and Config.ValidateKey apply to the key f returns.
//
// A panic of f makes the record poison (panicked), its handler unrun.
func WithKeyFunc(f func(r *kgo.Record) (string, error)) Option {
	return func(o *consume.Options) { o.SetKeyFunc(f) }
}

// WithRecordKey takes the idempotency key from the record's key: for
// producers that key each record by its unique event or order ID.
func WithRecordKey() Option {
	return WithKeyFunc(func(r *kgo.Record) (string, error) { return string(r.Key), nil })
}

// WithUnkeyedUnguarded runs the handler for a record that has no key, once
// per delivery and without idempotency, in its place in the partition. By
// default such a record is poison (missing-key). A key that is present but
// unusable is poison either way.
func WithUnkeyedUnguarded() Option { return func(o *consume.Options) { o.SetUnkeyedUnguarded() } }

// WithFingerprint sets the bytes of a record the Guard fingerprints: a key
// that comes back with other bytes gets idem.ErrKeyReused and is poison
// (key-reused). Default: the record's value.
//
// A panic of f makes the record poison (panicked), its handler unrun.
func WithFingerprint(f func(r *kgo.Record) []byte) Option {
	return func(o *consume.Options) { o.SetFingerprint(f) }
}

// WithDeadLetter is a poison decision: poison is produced to topic, then
// its offset is done. The dead letter carries the record's key, value and
// headers, the headers of package consumer (consumer.HeaderReason,
// consumer.HeaderCause, …) and [HeaderTopic], [HeaderPartition] and
// [HeaderOffset].
//
// A dead letter always fits: it is never larger than the producing
// client's kgo.ProducerBatchMaxBytes (franz-go's default 1,000,012 bytes,
// Kafka's default max.message.bytes), less 4 KiB for the record's framing;
// what it leaves out to fit (a key over 1 KiB, long headers, the value and
// the record's key) is recorded by size and SHA-256. If the broker refuses
// it as too large anyway (a topic whose max.message.bytes is smaller), it
// is produced again without the record's key, value and headers.
//
// A dead letter the broker refuses (the topic may not be written, its name
// is invalid, it does not exist and is not created, it is too large even
// stripped) is tried again with the retry backoff, WithMaxAttempts times;
// then the consumer gives up on it: it logs the record's topic, partition
// and offset at error level, reports [EventDiscarded] with the refusal in
// BrokerErr, and goes on, so that one record never stops its partition for
// good (the record stays in its topic while Kafka retains it). A broker
// that cannot be reached is an outage: the record waits, and its dead
// letter is tried again without end.
//
// The dead letter is produced with [WithDeadLetterClient]'s client, or the
// consuming client. [New] requires WithDeadLetter or [WithDiscardPoison].
func WithDeadLetter(topic string) Option {
	return func(o *consume.Options) {
		if o.Check(topic != "", "WithDeadLetter(%q): empty", topic) {
			o.DeadLetterTopic = topic
			o.SetDeadLetter()
		}
	}
}

// WithDiscardPoison is a poison decision: poison is logged (warn, with its
// reason and cause), reported as [EventDiscarded], and its offset is done:
// dropped. [New] requires WithDiscardPoison or [WithDeadLetter].
func WithDiscardPoison() Option { return func(o *consume.Options) { o.SetDiscardPoison() } }

// WithDeadLetterClient produces dead letters with cl instead of the
// consuming client; its kgo.ProducerBatchMaxBytes bounds them.
func WithDeadLetterClient(cl *kgo.Client) Option {
	return func(o *consume.Options) {
		if o.Check(cl != nil, "WithDeadLetterClient(nil)") {
			o.DeadLetterClient = cl
		}
	}
}

// WithMaxAttempts sets how many times the handler of a key may fail
// without a permanent mark, or panic, before its record is poison
// (too-many-attempts). Default consumer.DefaultMaxAttempts (10). The count
// is the store's count of the key's claims (idem.AttemptFrom), which holds
// across consumers, rebalances and restarts: a failure at the last attempt
// stores idem.ErrTooManyAttempts as the key's outcome, so its later copies
// are poison without running. A claim whose handler did not run counts
// too; a busy key, a store that cannot be reached, a lost lease and a
// shutdown are not failures. A record run unguarded, or under kafkapg
// (whose failed claim rolls back and leaves no count), is counted in
// memory, by the partition, in a row. It is also how many times a dead
// letter the broker refuses is tried.
func WithMaxAttempts(n int) Option { return func(o *consume.Options) { o.SetMaxAttempts(n) } }

// WithRetryBackoff sets the pauses before a record that could not be
// finished (its handler failed, the store could not be reached) is tried
// again, alone, in its place: first after the first failure, doubling up
// to longest, with jitter. Default 100ms to 10s.
func WithRetryBackoff(first, longest time.Duration) Option {
	return func(o *consume.Options) { o.SetRetryBackoff(first, longest) }
}

// WithBusyDelay sets the pause before a record whose key another holder
// has (a duplicate in flight on another partition or consumer) is tried
// again. Default 1s.
func WithBusyDelay(d time.Duration) Option { return func(o *consume.Options) { o.SetBusyDelay(d) } }

// WithDrainTimeout sets how long, at shutdown, handlers in flight may take
// to finish before their context is cancelled, and how long cancelled
// handlers may take to return, at shutdown or when their partition is
// revoked. Default 10s; 0 cancels them at once. Keep it under the group's
// rebalance timeout.
func WithDrainTimeout(d time.Duration) Option {
	return func(o *consume.Options) { o.SetDrainTimeout(d) }
}

// WithMaxBatch sets the most records of a partition handled together:
// claimed in one round trip and completed in one. Default
// [DefaultMaxBatch]; at least 1. A partition whose worker has that many
// records waiting is paused until it catches up.
func WithMaxBatch(n int) Option {
	return func(o *consume.Options) {
		if o.Check(n >= 1, "WithMaxBatch(%d): must be at least 1", n) {
			o.MaxBatch = n
		}
	}
}

// WithCommitInterval sets how often finished offsets are committed to
// Kafka. They are also committed when a partition is revoked and at
// shutdown. Default [DefaultCommitInterval].
func WithCommitInterval(d time.Duration) Option {
	return func(o *consume.Options) {
		if o.Check(d > 0, "WithCommitInterval(%v): must be positive", d) {
			o.CommitInterval = d
		}
	}
}

// WithLogger sets the logger of the consumer's warnings (retries, poison,
// commit failures), errors (a handler's panic, a dead letter given up on)
// and info lines (assignments). Default: the Guard's Config.Logger.
func WithLogger(l *slog.Logger) Option { return func(o *consume.Options) { o.SetLogger(l) } }

// WithObserver sets a function called with every [Event]: batches
// finished with the partition's lag, retries, dead letters, discarded
// poison, commits and rebalances. It runs on the consumer's goroutines:
// keep it fast. The Guard's own Observer (idem.Config) sees every claim
// and outcome. A panic of f is recovered (the first one logged at error
// level): it stops no record.
func WithObserver(f func(ctx context.Context, e Event)) Option {
	return func(o *consume.Options) {
		if o.Check(f != nil, "WithObserver(nil)") {
			o.Observer = f
		}
	}
}
