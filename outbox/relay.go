package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Relay publishes the pending messages of an outbox table through a
// [Publisher] and marks them sent; see the package documentation for how
// several relays share a table and keep each key's messages in order.
// Create one with [NewRelay] and call [Relay.Run]; it owns one database
// connection of its own while it runs, and no goroutine besides Run's.
type Relay struct {
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig
	pub     Publisher
	cfg     RelayConfig
	t       table
	q       relayQueries
	appName string // of its connection, unless the pool's config sets one

	mu      sync.Mutex
	closed  bool
	running bool
	stop    context.CancelFunc // ends the Run in progress
	done    chan struct{}      // closed when it has returned

	// What Run published or failed to, not yet written to the table; kept
	// across its database sessions.
	pending marks
}

// NewRelay returns a Relay that reads the outbox table with connections
// like pool's and publishes with pub. It fails when pool or pub is nil or
// a field of cfg is out of range; the error names it.
//
// The Relay opens its own connection with pool's connection settings
// (pool's BeforeConnect and AfterConnect hooks do not run for it) and keeps
// it while it runs: its advisory locks and LISTEN live in that session, so
// it must reach PostgreSQL directly or through a pooler in session mode,
// never in transaction mode. pool itself serves [Relay.Lag].
func NewRelay(pool *pgxpool.Pool, pub Publisher, cfg RelayConfig) (*Relay, error) {
	switch {
	case pool == nil:
		return nil, errors.New("outbox: NewRelay: pool is nil")
	case pub == nil:
		return nil, errors.New("outbox: NewRelay: Publisher is nil")
	}
	t, err := parseTable(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("outbox: RelayConfig.Table: %w", err)
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Relay{
		pool:    pool,
		connCfg: pool.Config().ConnConfig,
		pub:     pub,
		cfg:     cfg,
		t:       t,
		q:       newRelayQueries(t, cfg),
		appName: appName(t),
	}, nil
}

// appName is the application_name of a relay's connection, for
// pg_stat_activity: PostgreSQL keeps 63 bytes of it (table names are ASCII).
func appName(t table) string {
	name := "outbox relay " + t.name
	return name[:min(len(name), 63)]
}

// Run publishes until ctx ends or [Relay.Close] is called, then returns
// nil once it has marked what it published and closed its connection.
// While the database cannot be reached it retries, with backoff; it
// returns an error for a failure that retrying cannot mend (a missing
// table, a permission). Run returns [ErrRunning] while another Run of the
// Relay is in progress, and [ErrClosed] after Close.
func (r *Relay) Run(ctx context.Context) error {
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		return ErrClosed
	case r.running:
		r.mu.Unlock()
		return ErrRunning
	}
	ctx, stop := context.WithCancel(ctx)
	r.running, r.stop, r.done = true, stop, make(chan struct{})
	r.mu.Unlock()
	defer func() {
		stop()
		r.mu.Lock()
		r.running = false
		close(r.done)
		r.mu.Unlock()
	}()

	failures := 0
	for {
		s, err := r.connect(ctx)
		if err == nil {
			err = s.run(ctx)
			if s.published {
				failures = 0
			}
			s.close(ctx)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case !errors.Is(err, ErrUnavailable):
			return err
		}
		wait := r.backoff(failures)
		failures++
		r.cfg.Logger.WarnContext(ctx, "outbox: relay session failed; reconnecting",
			slog.String("table", r.t.name), slog.Duration("in", wait), slog.Any("error", err))
		r.observe(ctx, Event{Op: OpDisconnect, Err: err, Duration: wait})
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// Close stops the Run in progress, if any, and waits for it to return;
// later calls of Run return [ErrClosed]. Close is idempotent and safe for
// concurrent use. It does not close the pool or the Publisher.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	running, stop, done := r.running, r.stop, r.done
	r.mu.Unlock()
	if running {
		stop()
		<-done
	}
	return nil
}

func (r *Relay) observe(ctx context.Context, e Event) {
	if r.cfg.Observer != nil {
		e.Table = r.t.name
		r.cfg.Observer(ctx, e)
	}
}

// backoff returns the wait after n earlier failures in a row: MinBackoff
// doubled n times, at most MaxBackoff, the upper half of it at random.
func (r *Relay) backoff(n int) time.Duration {
	d := r.cfg.MinBackoff
	for ; n > 0 && d < r.cfg.MaxBackoff; n-- {
		d *= 2
	}
	d = min(d, r.cfg.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx ends, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
