package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Defaults of [Store.Reap] and [ReaperConfig].
const (
	DefaultReapBatch    = 1000
	DefaultReapInterval = time.Minute
)

// Reap deletes the expired records, at most batch rows per statement
// (DefaultReapBatch when batch ≤ 0), until fewer than batch were left or
// ctx ends, and returns how many it deleted. Each statement is short and,
// over a pool, its own transaction: it never holds many locks for long, and
// skips rows another transaction has locked (a claim replacing the expired
// record, say) instead of waiting for them. Expired records are invisible
// to every method anyway; Reap only gives their space back.
func (s *Store) Reap(ctx context.Context, batch int) (deleted int, err error) {
	if batch <= 0 {
		batch = DefaultReapBatch
	}
	for {
		tag, err := s.db.Exec(ctx, s.q.reap, batch)
		if err != nil {
			return deleted, translate("reap", err)
		}
		n := int(tag.RowsAffected())
		deleted += n
		if n < batch {
			return deleted, nil
		}
		if err := ctx.Err(); err != nil {
			return deleted, fmt.Errorf("pgstore: reap: %w", err)
		}
	}
}

// ReaperConfig configures a [Reaper]. The zero value means every default.
type ReaperConfig struct {
	// Interval is the pause between two reaps; the first runs at once.
	// Default DefaultReapInterval (1m).
	Interval time.Duration

	// Batch is the most rows one DELETE removes. Default DefaultReapBatch.
	Batch int

	// Timeout bounds one reap (all its batches). Default Interval.
	Timeout time.Duration

	// Logger receives a warning for each failed reap and a debug line for
	// each that deleted something. Default: discard.
	Logger *slog.Logger
}

// Reaper runs [Store.Reap] in a goroutine every Interval until it is
// closed. Several processes may each run one on the same table: they skip
// the rows the others hold.
type Reaper struct {
	s       *Store
	cfg     ReaperConfig
	cancel  context.CancelFunc
	stopped chan struct{}
	once    sync.Once
}

// NewReaper starts a Reaper for s. It fails when a field of cfg is
// negative; the error names it. Close it when done.
func NewReaper(s *Store, cfg ReaperConfig) (*Reaper, error) {
	switch {
	case s == nil:
		return nil, errors.New("pgstore: NewReaper: store is nil")
	case cfg.Interval < 0:
		return nil, fmt.Errorf("pgstore: ReaperConfig.Interval %v: must not be negative", cfg.Interval)
	case cfg.Batch < 0:
		return nil, fmt.Errorf("pgstore: ReaperConfig.Batch %d: must not be negative", cfg.Batch)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("pgstore: ReaperConfig.Timeout %v: must not be negative", cfg.Timeout)
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultReapInterval)
	cfg.Batch = cmp.Or(cfg.Batch, DefaultReapBatch)
	cfg.Timeout = cmp.Or(cfg.Timeout, cfg.Interval)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Reaper{s: s, cfg: cfg, cancel: cancel, stopped: make(chan struct{})}
	go r.run(ctx)
	return r, nil
}

func (r *Reaper) run(ctx context.Context) {
	defer close(r.stopped)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		n, err := r.s.Reap(rctx, r.cfg.Batch)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			r.cfg.Logger.Warn("pgstore: reaping expired records failed",
				slog.String("table", r.s.t.name), slog.Int("deleted", n), slog.Any("error", err))
		case n > 0:
			r.cfg.Logger.Debug("pgstore: reaped expired records", slog.String("table", r.s.t.name), slog.Int("deleted", n))
		}
		t.Reset(r.cfg.Interval)
	}
}

// Close stops the Reaper, cancelling a reap in flight, and waits for its
// goroutine to end. Close is idempotent and safe for concurrent use.
func (r *Reaper) Close() error {
	r.once.Do(r.cancel)
	<-r.stopped
	return nil
}
