package outbox

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

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
