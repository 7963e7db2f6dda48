package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

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
	// with parameters, is work repeated for every message that changes no
	// plan. The one statement whose plan could depend on its parameters,
	// the clean-up's, has none.
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
