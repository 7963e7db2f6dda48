package outbox

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgconn"
)

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
