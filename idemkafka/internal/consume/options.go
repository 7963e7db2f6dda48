package consume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Defaults of [Options].
const (
	DefaultKeyHeader      = "idempotency-key"
	DefaultMaxBatch       = 500
	DefaultCommitInterval = time.Second
	DefaultDrainTimeout   = 10 * time.Second
	DefaultMinBackoff     = 10 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DeadLetterSuffix      = ".dlq"
)

// Options configure a [Consumer]. The adapters fill them through their
// functional options; Prefix names the adapter in errors.
type Options struct {
	Prefix string // "idemkafka", "kafkapg"

	KeyHeader string                              // header holding the key; default DefaultKeyHeader
	KeyFunc   func(r *kgo.Record) (string, error) // replaces KeyHeader when set
	Unkeyed   bool                                // run records without a key unguarded instead of dead-lettering them

	Scope       func(r *kgo.Record) string // the record's scope; set by WithScope
	SharedScope bool                       // every record in the empty scope; set by WithSharedScope

	Payload func(r *kgo.Record) []byte // what is fingerprinted; default the record's value

	DeadLetterTopic  func(r *kgo.Record) string // default: the record's topic + DeadLetterSuffix
	DeadLetterClient *kgo.Client                // default: the consuming client

	MaxBatch       int           // records handed to the Processor at once; default DefaultMaxBatch
	CommitInterval time.Duration // between Kafka commits; default DefaultCommitInterval
	DrainTimeout   time.Duration // for in-flight handlers at a revoke or shutdown; default DefaultDrainTimeout
	MinBackoff     time.Duration // first pause before a retry; default DefaultMinBackoff
	MaxBackoff     time.Duration // longest pause before a retry; default DefaultMaxBackoff

	Logger   *slog.Logger                       // default: discard
	Observer func(ctx context.Context, e Event) // default: none

	errs []error
}

// Failf records a configuration error, reported by Check; the message is
// prefixed with the adapter's name.
func (o *Options) Failf(format string, args ...any) {
	o.errs = append(o.errs, fmt.Errorf("%s: "+format, append([]any{o.Prefix}, args...)...))
}

// Check fills in the defaults and returns the configuration errors, the
// missing scope decision among them.
func (o *Options) Check() error {
	switch {
	case o.Scope == nil && !o.SharedScope:
		o.Failf("no scope decision: pass WithScope(func(*kgo.Record) string) to key each record within its tenant, " +
			"or WithSharedScope() if one key names one operation whoever produced it (the same key from two tenants " +
			"must not name one operation unless you say so)")
	case o.Scope != nil && o.SharedScope:
		o.Failf("both WithScope and WithSharedScope: choose one")
	case o.MinBackoff > o.MaxBackoff && o.MaxBackoff > 0:
		o.Failf("WithRetryBackoff(%v, %v): the first pause is longer than the longest", o.MinBackoff, o.MaxBackoff)
	}
	if err := errors.Join(o.errs...); err != nil {
		return err
	}
	o.KeyHeader = cmp.Or(o.KeyHeader, DefaultKeyHeader)
	o.MaxBatch = cmp.Or(o.MaxBatch, DefaultMaxBatch)
	o.CommitInterval = cmp.Or(o.CommitInterval, DefaultCommitInterval)
	o.DrainTimeout = cmp.Or(o.DrainTimeout, DefaultDrainTimeout)
	o.MinBackoff = cmp.Or(o.MinBackoff, DefaultMinBackoff)
	o.MaxBackoff = cmp.Or(o.MaxBackoff, max(DefaultMaxBackoff, o.MinBackoff))
	if o.Payload == nil {
		o.Payload = func(r *kgo.Record) []byte { return r.Value }
	}
	if o.DeadLetterTopic == nil {
		o.DeadLetterTopic = func(r *kgo.Record) string { return r.Topic + DeadLetterSuffix }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
