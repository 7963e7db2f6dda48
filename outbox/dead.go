package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// DeadMessage is a dead row: a message the relay gave up on, for a
// permanent error ([Permanent]) or after RelayConfig.MaxAttempts failed
// publications. It stays in the dead rows' table (the outbox table's name
// with "_dead") until [Redrive] puts it back or [Discard] deletes it.
type DeadMessage struct {
	// RowID is the row's id in the outbox table, its publication order,
	// which Redrive keeps.
	RowID int64
	// Message is the message as enqueued, CreatedAt included.
	Message Message
	// Attempts is how many publications of it failed.
	Attempts int
	// LastError is the error of the last one.
	LastError string
	// DeadAt is when the relay gave up, by the database's clock.
	DeadAt time.Time
}

// MaxDeadBytes bounds the payloads that one call of [Dead] returns.
const MaxDeadBytes = 64 << 20 // 64 MiB

// Dead returns at most limit dead rows of table ("" for [DefaultTable]),
// the oldest first by id: what an operator looks at before a [Redrive] or
// a [Discard]. It returns fewer when their payloads would add up to more
// than [MaxDeadBytes] (but always the oldest row, however large): the
// rows after them come with the next call, once those are redriven or
// discarded ([Lag] counts them all). A row whose headers cannot be decoded
// comes with none, and its LastError says so. limit must be 1 to 10000.
func Dead(ctx context.Context, db DB, table string, limit int) ([]DeadMessage, error) {
	t, err := parseTable(table)
	if err != nil {
		return nil, fmt.Errorf("outbox: Dead: %w", err)
	}
	if limit < 1 || limit > 10000 {
		return nil, fmt.Errorf("outbox: Dead: limit %d: must be 1 to 10000", limit)
	}
	b := &pgx.Batch{}
	b.Queue(t.render("dead_rows"), limit, MaxDeadBytes)
	br := db.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, dbError("Dead", err)
	}
	defer rows.Close()
	var dead []DeadMessage
	for rows.Next() {
		var (
			d            DeadMessage
			key, headers []byte
		)
		if err := rows.Scan(&d.RowID, &d.Message.ID, &d.Message.Destination, &key, &headers, &d.Message.Payload,
			&d.Message.CreatedAt, &d.Attempts, &d.LastError, &d.DeadAt); err != nil {
			return nil, dbError("Dead", err)
		}
		d.Message.Key = string(key)
		if d.Message.Headers, err = DecodeHeaders(headers); err != nil {
			d.LastError = err.Error() + "; " + d.LastError
		}
		dead = append(dead, d)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("Dead", err)
	}
	return dead, nil
}

// Redrive puts the dead rows ids of table ("" for [DefaultTable]) back in
// the outbox table as pending, with no failure counted, and returns how
// many it found. A row keeps its id, so a relay publishes it before any
// pending row enqueued after it, but after the later messages of its key
// that were published while it was dead: a redriven message arrives out of
// its key's order. Redrive the rows once what failed them is mended (the
// stream or topic created, the permission granted); a row that fails again
// dies again. With db a pgx.Tx, it runs in that transaction. Redrive with
// no id does nothing.
func Redrive(ctx context.Context, db DB, table string, ids ...int64) (int, error) {
	t, err := parseTable(table)
	if err != nil {
		return 0, fmt.Errorf("outbox: Redrive: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return execCount(ctx, db, "Redrive", t.render("redrive"), ids)
}

// Discard deletes the dead rows ids of table ("" for [DefaultTable]), whose
// messages will not be published, and returns how many it found. With db a
// pgx.Tx, it runs in that transaction.
func Discard(ctx context.Context, db DB, table string, ids ...int64) (int, error) {
	t, err := parseTable(table)
	if err != nil {
		return 0, fmt.Errorf("outbox: Discard: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return execCount(ctx, db, "Discard", t.render("discard"), ids)
}

func execCount(ctx context.Context, db DB, op, sql string, ids []int64) (int, error) {
	tag, err := db.Exec(ctx, sql, pgtype.FlatArray[int64](ids))
	if err != nil {
		return 0, dbError(op, err)
	}
	return int(tag.RowsAffected()), nil
}
