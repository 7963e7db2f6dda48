package outbox

import (
	"context"
	"database/sql"
	"errors"
)

// SQLExecer is what [EnqueueSQL] writes with: *sql.Tx satisfies it, and so
// do *sql.DB and *sql.Conn. It must be of pgx's database/sql driver
// (github.com/jackc/pgx/v5/stdlib), which sends the messages' arrays as
// PostgreSQL arrays.
//
// It is an interface of its own, beside [DB], because database/sql and
// pgx spell their methods differently (ExecContext returning a sql.Result,
// Exec returning a pgconn.CommandTag): no one small interface is
// satisfied by both a *sql.Tx and a pgx.Tx without an adapter, and an
// adapter would cost Enqueue its single round trip (pgx pipelines the
// INSERT and the NOTIFY).
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// EnqueueSQL is [Enqueue] for code written against database/sql: it writes
// msgs to [DefaultTable] with tx, the caller's *sql.Tx.
func EnqueueSQL(ctx context.Context, tx SQLExecer, msgs ...Message) error {
	return defaultOutbox.EnqueueSQL(ctx, tx, msgs...)
}

// EnqueueSQL is [Outbox.Enqueue] for code written against database/sql
// (sqlc, sqlx, GORM, ent, bun, pgstore.SQLTxGuard): it writes msgs to the
// outbox table with tx, normally the caller's *sql.Tx on pgx's stdlib
// driver, so that they are published if and only if it commits. It
// checks and writes as Enqueue does, and returns the same errors. Its
// INSERT and, with Config.Notify, its NOTIFY are a round trip each
// (database/sql has no pipeline).
//
// The outbox is a PostgreSQL table, read by the Relay: EnqueueSQL does not
// write to SQLite.
func (o *Outbox) EnqueueSQL(ctx context.Context, tx SQLExecer, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if tx == nil {
		return errors.New("outbox: EnqueueSQL: tx is nil")
	}
	insert, args, err := o.insert(msgs)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, insert, args...); err != nil {
		return dbError("EnqueueSQL", err)
	}
	if o.notify {
		if _, err := tx.ExecContext(ctx, o.notifySQL); err != nil {
			return dbError("EnqueueSQL", err)
		}
	}
	return nil
}
