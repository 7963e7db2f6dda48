package kafkapg

import (
	"fmt"
	"time"

	"github.com/idemgo/idem/idemkafka"
)

// Option configures a [Consumer]; see [New].
type Option func(*config)

type config struct {
	recordsTable string
	offsetsTable string
	namespace    string
	retention    time.Duration
	lockTimeout  time.Duration
	perRecord    bool
	consumer     []idemkafka.Option
	errs         []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("kafkapg: "+format, args...))
}

// WithRecordsTable sets the idem records table (pgstore's, created by
// pgstore.Migrate). Default pgstore.DefaultTable.
func WithRecordsTable(name string) Option { return func(c *config) { c.recordsTable = name } }

// WithOffsetsTable sets the table of consumed offsets (created by
// [Migrate]). Default [DefaultOffsetsTable].
func WithOffsetsTable(name string) Option { return func(c *config) { c.offsetsTable = name } }

// WithNamespace sets the namespace of the consumer's keys in the records
// table, as idem.Config.Namespace does. Default "".
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithRetention sets how long an outcome is kept, so that a duplicate
// published later is recognised. Default idem.DefaultRetention (24h).
func WithRetention(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("WithRetention(%v): must be positive", d)
			return
		}
		c.retention = d
	}
}

// WithLockTimeout sets how long a record waits for another transaction
// that holds its key (a duplicate on another partition, in flight) before
// it is retried later. Default pgstore.DefaultLockTimeout (5s).
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.fail("WithLockTimeout(%v): must be at least 1ms", d)
			return
		}
		c.lockTimeout = d
	}
}

// WithPerRecordTransactions commits each record in a transaction of its
// own (its writes, its outcome and its offset) instead of one transaction
// per batch of a partition's records: a failure costs one record's work,
// at the price of a commit per record.
func WithPerRecordTransactions() Option { return func(c *config) { c.perRecord = true } }

// WithConsumerOptions passes options of idemkafka's consumer: the scope
// decision and the poison decision (both required), the key's source,
// dead letters, attempts (idemkafka.WithMaxAttempts: the count is the
// partition's, in this process, as a rolled-back transaction leaves
// nothing to count in the database), batch size, backoff, drain timeout,
// commit interval, logger and observer. In this
// mode Kafka commits are for lag dashboards only: the consumer starts from
// the offsets in PostgreSQL.
func WithConsumerOptions(opts ...idemkafka.Option) Option {
	return func(c *config) { c.consumer = append(c.consumer, opts...) }
}
