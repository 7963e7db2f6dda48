package outboxtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// Table creates a schema of tb's own (pgstoretest.Schema: dropped when tb
// ends) with a migrated outbox table in it, and returns the table's name,
// schema.outbox.
func Table(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	table := pgstoretest.Schema(tb, pool) + ".outbox"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := outbox.Migrate(ctx, pool, table); err != nil {
		tb.Fatalf("outbox.Migrate: %v", err)
	}
	return table
}

// Pending returns how many rows of table are not sent yet, and how many
// rows it has in all.
func Pending(tb testing.TB, pool *pgxpool.Pool, table string) (pending, all int) {
	tb.Helper()
	q := "SELECT count(*) FILTER (WHERE sent_at IS NULL), count(*) FROM " + quote(table)
	if err := pool.QueryRow(context.Background(), q).Scan(&pending, &all); err != nil {
		tb.Fatalf("counting rows of %s: %v", table, err)
	}
	return pending, all
}

// quote quotes a table name given as name or schema.name.
func quote(table string) string { return pgx.Identifier(strings.Split(table, ".")).Sanitize() }

// RowIDs returns the message IDs of the rows of ob's table in the order of
// their id column: the order they were enqueued in.
func RowIDs(tb testing.TB, pool *pgxpool.Pool, ob *outbox.Outbox) []string {
	tb.Helper()
	rows, err := pool.Query(context.Background(), "SELECT message_id FROM "+ob.Table()+" ORDER BY id")
	if err != nil {
		tb.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatal(err)
	}
	return ids
}
