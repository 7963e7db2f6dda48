package outbox

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"
)

// RelayConfig configures a [Relay]. The zero value means every default.
type RelayConfig struct {
	// Table is the outbox table, as [Config.Table]. Default [DefaultTable].
	Table string

	// Partitions is how many partitions the table's keys are hashed into;
	// each is published by one relay at a time, so it bounds how many
	// relays share the work. Every relay of a table must use the same
	// value: relays that disagree would publish a key from two partitions
	// at once, so while relays with different values run, only those with
	// the smallest one hold partitions, and the others log why they wait.
	// Default [DefaultPartitions]; 1 to [MaxPartitions].
	Partitions int

	// BatchSize is the most messages read and handed to the Publisher at
	// once. Default [DefaultBatchSize]; 1 to 10000.
	BatchSize int

	// MaxBatchBytes bounds the payloads of a batch, in bytes, as BatchSize
	// bounds its messages: the relay holds a batch in memory (and, while
	// the broker takes a full batch, reads the next). A batch holds at
	// least one message, however large. Default [DefaultMaxBatchBytes].
	MaxBatchBytes int

	// MaxAttempts is how many failed publications of a message the relay
	// makes before it moves the row to the dead rows (see [Dead]) and
	// publishes the later messages of its key without it. Only a failure
	// that says something about the message counts, a refusal of a broker
	// that answered: a failure the Publisher marks [Unavailable] (the
	// broker could not be reached) or a message that got no answer before
	// PublishTimeout counts no attempt, and a broker outage, however long,
	// makes no dead row (the relay backs off as a whole, see MinBackoff).
	// Between attempts a row waits out a backoff of its own, MinBackoff
	// doubled at each failure up to MaxBackoff, with jitter; meanwhile the
	// rows of other keys are published. A failure the Publisher marks as
	// permanent ([Permanent]) makes the row dead at once. With the default
	// backoffs, a message a live broker refuses at every attempt is dead
	// after four to seven minutes. Default [DefaultMaxAttempts]; 1 to
	// 1,000,000.
	MaxAttempts int

	// DeleteSent deletes each row once its message is published, instead
	// of setting its sent_at and deleting it after Retention. A DELETE
	// writes no new row version and no index entries, where the UPDATE of
	// a mark writes both and the clean-up deletes the row later anyway:
	// the relay publishes faster with it. Default false: sent rows are
	// kept, for inspection and replay by hand.
	DeleteSent bool

	// Retention is how long sent rows are kept before the relay deletes
	// them (unless DeleteSent). Default 24h; at least 1s.
	Retention time.Duration

	// CleanupInterval is how often the relay deletes the sent rows past
	// Retention, at most 10,000 at a time. Every relay of a table does it;
	// they skip each other's rows. Default 1m.
	CleanupInterval time.Duration

	// PollInterval is the longest an idle relay waits before it looks for
	// pending messages again: the latency of a message enqueued while the
	// relay is idle, unless it was enqueued with Config.Notify. Each poll
	// is one read of the pending rows' index. Default 100ms.
	PollInterval time.Duration

	// RebalanceInterval is how often a relay counts the relays of its
	// table and takes or gives up partitions to hold its share. A relay
	// that stops (or whose session ends) frees its partitions at once; the
	// others take them within this interval. Default 2s.
	RebalanceInterval time.Duration

	// PublishTimeout bounds one Publish call. A message that failed
	// because it ran out (the broker did not answer in time) counts no
	// attempt: it is retried after the relay's backoff. Default 30s.
	PublishTimeout time.Duration

	// MinBackoff and MaxBackoff bound the relay's wait after a batch of
	// which no message was published because the broker could not be
	// reached (a failure the Publisher marks [Unavailable], a Publish that
	// ran out of time or failed as a whole), for as long as it stays away,
	// and after a lost database session: it starts at MinBackoff and
	// doubles, with jitter, up to MaxBackoff, and resets once a message is
	// published. They bound the backoff of a failed row (see MaxAttempts)
	// the same way. A batch whose messages the broker refused, each for
	// itself, does not make the relay wait: those rows wait out their own
	// backoffs, and the next batch holds the rows of other keys. Defaults
	// 100ms and 10s.
	MinBackoff, MaxBackoff time.Duration

	// LagInterval is how often the relay reports the table's backlog to
	// the Observer (OpLag). Default 10s.
	LagInterval time.Duration

	// Observer receives the relay's events (OpPublish, OpLag, …) for
	// metrics. Default: none.
	Observer Observer

	// Logger receives warnings (publish failures, lost sessions) and debug
	// lines. Default: discard.
	Logger *slog.Logger
}

// Defaults and limits of [RelayConfig].
const (
	DefaultPartitions    = 16
	MaxPartitions        = 1024
	DefaultBatchSize     = 100
	maxBatchSize         = 10000
	DefaultMaxBatchBytes = 4 << 20 // 4 MiB
	DefaultMaxAttempts   = 50
	maxMaxAttempts       = 1000000
)

func (c RelayConfig) withDefaults() (RelayConfig, error) {
	durations := []struct {
		name string
		d    time.Duration
	}{
		{"Retention", c.Retention}, {"CleanupInterval", c.CleanupInterval}, {"PollInterval", c.PollInterval},
		{"RebalanceInterval", c.RebalanceInterval}, {"PublishTimeout", c.PublishTimeout},
		{"MinBackoff", c.MinBackoff}, {"MaxBackoff", c.MaxBackoff}, {"LagInterval", c.LagInterval},
	}
	for _, f := range durations {
		if f.d < 0 {
			return c, fmt.Errorf("outbox: RelayConfig.%s %v: must not be negative", f.name, f.d)
		}
	}
	switch {
	case c.Partitions < 0 || c.Partitions > MaxPartitions:
		return c, fmt.Errorf("outbox: RelayConfig.Partitions %d: must be 1 to %d", c.Partitions, MaxPartitions)
	case c.BatchSize < 0 || c.BatchSize > maxBatchSize:
		return c, fmt.Errorf("outbox: RelayConfig.BatchSize %d: must be 1 to %d", c.BatchSize, maxBatchSize)
	case c.MaxBatchBytes < 0:
		return c, fmt.Errorf("outbox: RelayConfig.MaxBatchBytes %d: must not be negative", c.MaxBatchBytes)
	case c.MaxAttempts < 0 || c.MaxAttempts > maxMaxAttempts:
		return c, fmt.Errorf("outbox: RelayConfig.MaxAttempts %d: must be 1 to %d", c.MaxAttempts, maxMaxAttempts)
	case c.Retention > 0 && c.Retention < time.Second:
		return c, fmt.Errorf("outbox: RelayConfig.Retention %v: must be at least 1s", c.Retention)
	}
	c.Partitions = cmp.Or(c.Partitions, DefaultPartitions)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.MaxBatchBytes = cmp.Or(c.MaxBatchBytes, DefaultMaxBatchBytes)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.Retention = cmp.Or(c.Retention, 24*time.Hour)
	c.CleanupInterval = cmp.Or(c.CleanupInterval, time.Minute)
	c.PollInterval = cmp.Or(c.PollInterval, 100*time.Millisecond)
	c.RebalanceInterval = cmp.Or(c.RebalanceInterval, 2*time.Second)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, 30*time.Second)
	c.MinBackoff = cmp.Or(c.MinBackoff, 100*time.Millisecond)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 10*time.Second)
	c.LagInterval = cmp.Or(c.LagInterval, 10*time.Second)
	if c.MaxBackoff < c.MinBackoff {
		return c, fmt.Errorf("outbox: RelayConfig.MaxBackoff %v: must not be below MinBackoff %v", c.MaxBackoff, c.MinBackoff)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}
