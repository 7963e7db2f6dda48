package outbox

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

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

func (s *session) sampleLag(ctx context.Context) {
	var l Lag
	if err := s.conn.QueryRow(ctx, s.r.q.lag).Scan(&l.Pending, &l.OldestPending, &l.Dead); err != nil {
		s.r.cfg.Logger.WarnContext(ctx, "outbox: reading the lag failed", slog.String("table", s.r.t.name), slog.Any("error", err))
		return
	}
	s.r.observe(ctx, Event{Op: OpLag, Pending: l.Pending, OldestPending: l.OldestPending, Dead: int(l.Dead)})
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
