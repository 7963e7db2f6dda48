package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
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
	// costs PostgreSQL several times less than the UPDATE of a mark (no
	// new row version, no index entries), which shows in the relay's rate
	// (see BENCHMARKS.md). Default false: sent rows are kept, for
	// inspection and replay by hand.
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

// marks are the outcomes of published rows, to write to the table with
// the next read: the rows to mark sent (or delete), and those whose
// publication failed, with the errors to record and whether each failed
// for good.
type marks struct {
	sent      []int64
	failed    []int64
	errs      []string
	permanent []bool
}

// queue queues the statements that write m, and returns the position in b
// of the one that moves rows to the dead rows, -1 if none. The happy path
// queues one statement; failures add two: the first moves the rows that
// failed for good or for the last allowed time to the dead rows, the
// second records the failure of the others and sets their next attempt.
func (m *marks) queue(b *pgx.Batch, q relayQueries) (kill int) {
	// FlatArray: encoded without reflection.
	if len(m.sent) > 0 {
		b.Queue(q.mark, pgtype.FlatArray[int64](m.sent))
	}
	if len(m.failed) == 0 {
		return -1
	}
	kill = b.Len()
	b.Queue(q.kill, pgtype.FlatArray[int64](m.failed), m.errs, pgtype.FlatArray[bool](m.permanent))
	b.Queue(q.recordFailures, pgtype.FlatArray[int64](m.failed), m.errs)
	return kill
}

// takeMarks hands the pending marks over to a statement that writes them.
func (r *Relay) takeMarks() marks {
	m := r.pending
	r.pending = marks{}
	return m
}

// restoreMarks puts back marks whose statement failed, ahead of newer ones.
func (r *Relay) restoreMarks(m marks) {
	r.pending.sent = append(m.sent, r.pending.sent...)
	r.pending.failed = append(m.failed, r.pending.failed...)
	r.pending.errs = append(m.errs, r.pending.errs...)
	r.pending.permanent = append(m.permanent, r.pending.permanent...)
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

// Lag returns the backlog of the relay's table, read with the pool: how
// many messages are pending and how old the oldest is, by the database's
// clock, and how many rows are dead.
func (r *Relay) Lag(ctx context.Context) (Lag, error) {
	var l Lag
	if err := r.pool.QueryRow(ctx, r.q.lag).Scan(&l.Pending, &l.OldestPending, &l.Dead); err != nil {
		return Lag{}, dbError("Lag", err)
	}
	return l, nil
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

// cleanupTimeout bounds what runs after Run's context ended: marking what
// was published, closing the connection.
const cleanupTimeout = 5 * time.Second

// session is a Run's database session: its connection, the partitions it
// holds (advisory locks of that session) and its timers.
type session struct {
	r         *Relay
	conn      *pgx.Conn
	woken     bool  // a notification arrived since the last fetch
	held      []int // the partitions held, sorted
	members   int
	yielding  bool // a relay with fewer partitions runs
	published bool // some message was published in this session
	failures  int  // batches in a row of which nothing was published

	retryAt, rebalanceAt, cleanupAt, lagAt time.Time
}

// connect opens the session's connection, listens to the table's channel
// and registers the relay as a member of the table's relays.
func (r *Relay) connect(ctx context.Context) (*session, error) {
	s := &session{r: r}
	cfg := r.connCfg.Copy()
	// Called on Run's goroutine, while the connection reads: no lock needed.
	cfg.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) { s.woken = true }
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if _, set := cfg.RuntimeParams["application_name"]; !set {
		cfg.RuntimeParams["application_name"] = r.appName
	}
	// The relay's writes are marks: one lost with the server's last
	// transactions in a crash only means its message is published again,
	// with its ID. Not waiting for the WAL flush of each keeps the marks off
	// the publishing path.
	cfg.RuntimeParams["synchronous_commit"] = "off"
	// The relay's statements are prepared, and their best plans (index
	// scans by id) do not depend on their parameters: planning them again
	// at every execution, as PostgreSQL may do for a prepared statement
	// with parameters, cost the relay's backend a third of its CPU time
	// per message (see BENCHMARKS.md). The one statement whose plan could
	// depend on its parameters, the clean-up's, has none.
	if _, set := cfg.RuntimeParams["plan_cache_mode"]; !set {
		cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, dbError("connect", err)
	}
	s.conn = conn
	b := &pgx.Batch{}
	b.Queue(r.q.listen)
	b.Queue(r.q.join, r.t.lockClass, r.q.memberID)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		s.close(ctx)
		return nil, dbError("connect", err)
	}
	return s, nil
}

// close marks what was published and ends the session, which frees its
// locks, even after ctx ended.
func (s *session) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if !s.conn.IsClosed() {
		if err := s.flush(ctx); err != nil {
			s.r.cfg.Logger.WarnContext(ctx, "outbox: marking published messages failed; they will be published again",
				slog.String("table", s.r.t.name), slog.Any("error", err))
		}
	}
	s.conn.Close(ctx)
}

// run is the relay's loop over one session: rebalance, clean up and sample
// the lag when due; read a batch of its partitions' pending messages,
// publish it, and, while the broker takes it, mark the batch before and
// read the next one (one round trip for both); when idle, wait for a
// notification or the poll interval. It returns when ctx ends (nil) or
// the session fails.
func (s *session) run(ctx context.Context) error {
	r := s.r
	var ahead []row // the next batch, read while the last one was published
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(s.rebalanceAt) {
			changed, err := s.rebalance(ctx)
			if err != nil {
				return err
			}
			if changed {
				ahead = nil // it may hold rows of partitions given up
			}
			s.rebalanceAt = now.Add(r.cfg.RebalanceInterval)
		}
		if !now.Before(s.cleanupAt) {
			s.cleanup(ctx)
			s.cleanupAt = now.Add(r.cfg.CleanupInterval)
		}
		if !now.Before(s.lagAt) {
			s.sampleLag(ctx)
			s.lagAt = now.Add(r.cfg.LagInterval)
		}
		if now.Before(s.retryAt) || len(s.held) == 0 {
			ahead = nil
			if err := s.flush(ctx); err != nil {
				return err
			}
			s.sleepUntil(ctx, s.nextDue(s.retryAt))
			continue
		}
		rows := ahead
		if len(rows) == 0 {
			var err error
			if rows, err = s.fetch(ctx); err != nil {
				return err
			}
		}
		if len(rows) == 0 {
			if err := s.wait(ctx, s.nextDue(now.Add(r.cfg.PollInterval))); err != nil {
				return err
			}
			continue
		}
		var err error
		if ahead, err = s.publishReadingAhead(ctx, rows); err != nil {
			return err
		}
	}
	return nil
}

// publishReadingAhead publishes rows and, when they are a full batch (so
// more may be pending), meanwhile writes the marks of the batch before and
// reads the next batch, the first pending rows but rows, which it
// returns: the database's work hides behind the broker's. The batch read
// ahead is dropped when a message of rows failed: that message must be
// published again before the messages of its key after it, and the next
// read, with rows marked or not, starts from it.
func (s *session) publishReadingAhead(ctx context.Context, rows []row) ([]row, error) {
	r := s.r
	if len(rows) < r.cfg.BatchSize {
		s.publish(ctx, rows)
		return nil, nil
	}
	type read struct {
		rows []row
		dead int
		err  error
	}
	m, inFlight := r.takeMarks(), make([]int64, len(rows))
	for i, rw := range rows {
		inFlight[i] = rw.id
	}
	next := make(chan read, 1)
	go func() { // the connection is this goroutine's until it sends
		rs, dead, err := s.read(ctx, m, inFlight)
		next <- read{rs, dead, err}
	}()
	received := false
	defer func() {
		if !received { // Publish panicked: the connection is not to be shared
			<-next
		}
	}()
	ok := s.publish(ctx, rows)
	res := <-next
	received = true
	if res.err != nil {
		r.restoreMarks(m)
		return nil, res.err
	}
	s.observeDead(ctx, m, res.dead)
	if !ok {
		return nil, nil
	}
	return res.rows, nil
}

// nextDue returns the earlier of t and the next housekeeping time.
func (s *session) nextDue(t time.Time) time.Time {
	t = minTime(t, s.rebalanceAt)
	t = minTime(t, s.cleanupAt)
	return minTime(t, s.lagAt)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (s *session) sleepUntil(ctx context.Context, t time.Time) {
	if d := time.Until(t); d > 0 {
		sleep(ctx, d)
	}
}

// wait waits on the connection until a notification arrives or t, unless
// one arrived since the last fetch.
func (s *session) wait(ctx context.Context, t time.Time) error {
	if s.woken {
		return nil
	}
	wctx, cancel := context.WithDeadline(ctx, t)
	defer cancel()
	err := s.conn.PgConn().WaitForNotification(wctx)
	if err != nil && wctx.Err() != nil {
		return nil // the deadline, or the end of Run
	}
	return dbError("wait for notifications", err)
}

// row is a pending message read by fetch.
type row struct {
	id  int64
	msg Message
	err error // the headers column could not be decoded
}

// fetch writes the pending marks and reads the next batch in one round
// trip.
func (s *session) fetch(ctx context.Context) ([]row, error) {
	m := s.r.takeMarks()
	rows, dead, err := s.read(ctx, m, nil)
	if err != nil {
		s.r.restoreMarks(m)
		return nil, err
	}
	s.observeDead(ctx, m, dead)
	return rows, nil
}

// observeDead reports that writing m moved dead rows to the dead rows.
func (s *session) observeDead(ctx context.Context, m marks, dead int) {
	if dead == 0 {
		return
	}
	r := s.r
	var err error // the first permanent failure, else the first
	for i, e := range m.errs {
		if err == nil || m.permanent[i] {
			err = errors.New(e)
		}
		if m.permanent[i] {
			break
		}
	}
	r.cfg.Logger.WarnContext(ctx, "outbox: messages moved to the dead rows; the later messages of their keys go on without them",
		slog.String("table", r.t.name), slog.Int("messages", dead), slog.Any("error", err))
	r.observe(ctx, Event{Op: OpDead, Dead: dead, Err: err})
}

// read writes m and reads the first batch of pending rows but those of
// inFlight (being published, not marked yet), in one round trip: the
// statements run as one implicit transaction, in order. It touches nothing
// of the session but its connection (and woken, which the connection
// sets), so it may run beside a Publish.
//
// Every read starts from the first pending row. A row can become visible
// after rows with higher ids were read, its transaction having drawn its
// id first and committed last; a read that started after the rows it had
// read (a cursor) would pass it by and publish the next message of its
// key first.
func (s *session) read(ctx context.Context, m marks, inFlight []int64) (rows []row, dead int, err error) {
	r := s.r
	b := &pgx.Batch{}
	kill := m.queue(b, r.q)
	skip := pgtype.FlatArray[int64](inFlight)
	if skip == nil {
		skip = pgtype.FlatArray[int64]{} // not NULL: id <> ALL(NULL) holds for no row
	}
	if len(s.held) == r.cfg.Partitions {
		b.Queue(r.q.fetchAll, skip, r.cfg.BatchSize)
	} else {
		parts := make([]int64, len(s.held))
		for i, p := range s.held {
			parts[i] = int64(p)
		}
		b.Queue(r.q.fetch, skip, int64(r.cfg.Partitions), parts, r.cfg.BatchSize)
	}
	s.woken = false
	br := s.conn.SendBatch(ctx, b)
	rows, dead, err = readRows(br, b.Len()-1, kill, r.cfg.BatchSize)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, dbError("fetch", err)
	}
	return rows, dead, nil
}

// readRows reads the results of marks statements, the kill-th of which
// moved rows to the dead rows (-1: none), then the rows of the fetch after
// them, at most batch. It returns how many rows died. It allocates little
// per row: the rows are a message's worth of garbage for every message
// published.
func readRows(br pgx.BatchResults, marks, kill, batch int) (_ []row, dead int, _ error) {
	for i := range marks {
		tag, err := br.Exec()
		if err != nil {
			return nil, 0, err
		}
		if i == kill {
			dead = int(tag.RowsAffected())
		}
	}
	rs, err := br.Query()
	if err != nil {
		return nil, 0, err
	}
	defer rs.Close()
	var rows []row // nil when none: no batch read ahead
	var (
		id           int64
		msgID        string
		key, headers []byte
		payload      []byte
		createdAt    time.Time
		dest         string // the last destination, shared by the rows that have it
	)
	for rs.Next() {
		// A batch's rows mostly go to a few destinations: one string
		// for each run of them. Text is the same bytes in either format.
		if raw := rs.RawValues(); len(raw) > 2 && string(raw[2]) != dest {
			dest = string(raw[2])
		}
		// pgx copies a bytea into a new slice: the message keeps payload.
		if err := rs.Scan(&id, &msgID, nil, &key, &headers, &payload, &createdAt); err != nil {
			return nil, 0, err
		}
		rw := row{id: id, msg: Message{ID: msgID, Destination: dest, Key: string(key), Payload: payload, CreatedAt: createdAt}}
		rw.msg.Headers, rw.err = DecodeHeaders(headers)
		if rows == nil {
			rows = make([]row, 0, batch)
		}
		rows = append(rows, rw)
	}
	return rows, dead, rs.Err()
}

// publish hands rows to the Publisher, notes which were published (to
// mark with the next read) and which failed, and reports whether all were
// published. When none was because the broker could not be reached, or the
// call failed as a whole, the relay backs off as a whole; when the broker
// refused the messages each for itself, it does not (their rows wait out
// their own backoffs, see RelayConfig.MaxAttempts). A row whose headers cannot
// be decoded fails without being published, and holds back the later rows
// of its key.
//
// Of the failed messages of a key, only the first is charged a failed
// attempt (and waits out a backoff of its own, or dies): the later ones
// failed behind it, as a Publisher fails them, and are published after it.
// A later one that failed with a permanent error of its own dies too.
func (s *session) publish(ctx context.Context, rows []row) bool {
	r := s.r
	msgs := make([]Message, 0, len(rows))
	ok := make([]row, 0, len(rows)) // the rows handed to the Publisher
	var (
		blocked     map[string]bool
		undecodable int
		firstErr    error
	)
	for _, rw := range rows {
		switch {
		case blocked[rw.msg.Key]:
		case rw.err != nil:
			r.noteFailed(rw.id, rw.err)
			undecodable++
			if firstErr == nil {
				firstErr = rw.err
			}
			if rw.msg.Key == "" {
				break // unkeyed: ordered with no other message
			}
			if blocked == nil {
				blocked = map[string]bool{}
			}
			blocked[rw.msg.Key] = true
		default:
			msgs = append(msgs, rw.msg)
			ok = append(ok, rw)
		}
	}
	var (
		errs            []error
		whole, timedOut bool
	)
	start := time.Now()
	if len(msgs) > 0 {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
		errs, whole = failures(len(msgs), r.pub.Publish(pctx, msgs))
		timedOut = pctx.Err() != nil
		cancel()
	}
	elapsed := time.Since(start)
	sent, failed, unavailable, charged := 0, undecodable, 0, undecodable
	for i, err := range errs {
		if err == nil {
			r.pending.sent = append(r.pending.sent, ok[i].id)
			sent++
			continue
		}
		failed++
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil { // not a failure of the message's: Run is ending
			continue
		}
		key := ok[i].msg.Key
		switch {
		case brokerUnavailable(err, whole && timedOut):
			unavailable++ // not the message's failure: no attempt, no backoff of its own
		case errors.Is(err, ErrHeldBack) || key != "" && blocked[key] && !IsPermanent(err):
			continue // behind a failure of its key; a permanent one is its own
		default:
			r.noteFailed(ok[i].id, err)
			charged++
		}
		if key != "" {
			if blocked == nil {
				blocked = map[string]bool{}
			}
			blocked[key] = true
		}
	}
	if ctx.Err() != nil {
		return false
	}
	r.observe(ctx, Event{Op: OpPublish, Sent: sent, Failed: failed, Unavailable: unavailable, Duration: elapsed, Err: firstErr})
	if sent > 0 {
		s.published = true
		s.failures = 0
		return failed == 0
	}
	if unavailable == 0 && !whole && charged > 0 {
		// The broker answered, refusing messages each for itself: every
		// failed key has a row charged, which waits out its own backoff
		// (or is dead), and the next read passes its key by. Waiting here
		// would hold back the other keys for a few poison rows.
		r.cfg.Logger.WarnContext(ctx, "outbox: the broker refused messages; each waits out its own backoff",
			slog.String("table", r.t.name), slog.Int("messages", failed), slog.Any("error", firstErr))
		return false
	}
	wait := r.backoff(s.failures)
	s.failures++
	s.retryAt = time.Now().Add(wait)
	msg := "outbox: publishing failed; backing off"
	if unavailable == failed {
		msg = "outbox: the broker is unavailable; backing off (no attempt counted)"
	}
	r.cfg.Logger.WarnContext(ctx, msg, slog.String("table", r.t.name), slog.Int("messages", failed),
		slog.Int("unavailable", unavailable), slog.Duration("for", wait), slog.Any("error", firstErr))
	r.observe(ctx, Event{Op: OpBackoff, Duration: wait, Err: firstErr})
	return false
}

// brokerUnavailable reports whether err, a message's failure in a Publish
// while Run goes on, says the broker could not be reached rather than
// anything of the message: the Publisher said so ([Unavailable]), or the
// message failed with a context's error (PublishTimeout ran out before the
// broker answered), or the call failed as a whole once its PublishTimeout
// had run out (timedOut). A permanent failure is never one.
func brokerUnavailable(err error, timedOut bool) bool {
	switch {
	case IsPermanent(err):
		return false
	case IsUnavailable(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return true
	}
	return timedOut
}

// noteFailed notes that row id failed with err, to record in the row, or
// to move the row to the dead rows when err is permanent or the row has
// failed MaxAttempts times.
func (r *Relay) noteFailed(id int64, err error) {
	msg := err.Error()
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	r.pending.failed = append(r.pending.failed, id)
	r.pending.errs = append(r.pending.errs, strings.ToValidUTF8(msg, "?"))
	r.pending.permanent = append(r.pending.permanent, IsPermanent(err))
}

// flush writes the pending marks, if any.
func (s *session) flush(ctx context.Context) error {
	m := s.r.takeMarks()
	b := &pgx.Batch{}
	kill := m.queue(b, s.r.q)
	if b.Len() == 0 {
		return nil
	}
	br := s.conn.SendBatch(ctx, b)
	dead := 0
	var err error
	for i := range b.Len() {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err != nil {
			break
		}
		if i == kill {
			dead = int(tag.RowsAffected())
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.r.restoreMarks(m)
		return dbError("mark", err)
	}
	s.observeDead(ctx, m, dead)
	return nil
}

// cleanup deletes the sent rows past the retention, a thousand per
// statement, at most ten statements per call: a large backlog of them is
// worked off over several intervals, without holding up publishing.
func (s *session) cleanup(ctx context.Context) {
	r := s.r
	if r.cfg.DeleteSent {
		return
	}
	deleted := 0
	var err error
	for range cleanupRounds {
		var tag pgconn.CommandTag
		tag, err = s.conn.Exec(ctx, r.q.cleanup)
		if err != nil {
			err = dbError("cleanup", err)
			break
		}
		deleted += int(tag.RowsAffected())
		if tag.RowsAffected() < cleanupBatch {
			break
		}
	}
	if err != nil && ctx.Err() == nil {
		r.cfg.Logger.WarnContext(ctx, "outbox: deleting sent messages failed", slog.String("table", r.t.name), slog.Any("error", err))
	}
	if deleted > 0 || err != nil {
		r.observe(ctx, Event{Op: OpCleanup, Deleted: deleted, Err: err})
	}
}

const cleanupBatch, cleanupRounds = 1000, 10

func (s *session) sampleLag(ctx context.Context) {
	var l Lag
	if err := s.conn.QueryRow(ctx, s.r.q.lag).Scan(&l.Pending, &l.OldestPending, &l.Dead); err != nil {
		s.r.cfg.Logger.WarnContext(ctx, "outbox: reading the lag failed", slog.String("table", s.r.t.name), slog.Any("error", err))
		return
	}
	s.r.observe(ctx, Event{Op: OpLag, Pending: l.Pending, OldestPending: l.OldestPending, Dead: int(l.Dead)})
}

// relayQueries are a Relay's statements, rendered from queries.sql for its
// table and configuration; each is described there, under its name.
type relayQueries struct {
	listen, fetch, fetchAll, mark, kill, recordFailures, cleanup, lag string
	join, members, release, acquire                                   string
	// memberID is the second key of the lock every relay of the table
	// holds shared while it runs: -Partitions, so relays with different
	// partition counts see each other (partition locks use 0…n-1).
	memberID int32
}

// ReadLag returns the backlog of table ("" for [DefaultTable]) without a
// Relay: what an operator's tool shows (idem outbox stats). A Relay's
// [Relay.Lag] reads the same.
func ReadLag(ctx context.Context, db DB, table string) (Lag, error) {
	t, err := parseTable(table)
	if err != nil {
		return Lag{}, fmt.Errorf("outbox: ReadLag: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue(t.render("lag"))
	br := db.SendBatch(ctx, b)
	defer br.Close()
	var l Lag
	if err := br.QueryRow().Scan(&l.Pending, &l.OldestPending, &l.Dead); err != nil {
		return Lag{}, dbError("ReadLag", err)
	}
	return l, nil
}

func newRelayQueries(t table, cfg RelayConfig) relayQueries {
	backoff := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'g', -1, 64) }
	fetch := []string{"max_batch_bytes", itoa(cfg.MaxBatchBytes)}
	q := relayQueries{
		listen:   t.render("listen"),
		fetchAll: t.render("fetch_all", fetch...),
		fetch:    t.render("fetch", fetch...),
		mark:     t.render("mark"),
		kill:     t.render("kill", "max_attempts", itoa(cfg.MaxAttempts)),
		recordFailures: t.render("record_failures",
			"min_backoff", backoff(cfg.MinBackoff), "max_backoff", backoff(cfg.MaxBackoff)),
		cleanup: t.render("cleanup",
			"retention_us", itoa(cfg.Retention.Microseconds()), "cleanup_batch", itoa(cleanupBatch)),
		lag:      t.render("lag"),
		join:     t.render("join"),
		members:  t.render("members"),
		release:  t.render("release"),
		acquire:  t.render("acquire"),
		memberID: int32(-cfg.Partitions),
	}
	if cfg.DeleteSent {
		q.mark = t.render("mark_delete")
	}
	return q
}
