package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/storage"
)

// The ledger is where the consumers' side effects land: a PostgreSQL schema
// of the run's own, outside every store under test, so that a store that
// loses or repeats something cannot hide it. Every side effect is one row
// of effects; nothing in the table stops a second row for a key, so the
// count per key is what the consumers did, not what the table allowed.
//
// fence holds, per key, the token of the claim whose effect was applied.
// A fenced side effect (Mode fenced) inserts its effects row only in the
// same statement that inserts the key's fence row, so the effect is
// applied under one token per key, and a holder with any other token (a
// stale holder that lost its lease, or the one that took over after a
// crash between the effect and the outcome) is refused: it finds the
// effect already applied and does not apply it again. This is the fencing
// the README names ("fence the side effect with the token"); it needs no
// order among tokens, which redisstore draws at random.
const ledgerSchema = `
CREATE TABLE {s}.effects (
	key   text        NOT NULL,
	token bigint      NOT NULL,
	pid   int         NOT NULL,
	at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE {s}.fence (
	key   text   PRIMARY KEY,
	token bigint NOT NULL
);`

// ledger is one run's ledger.
type ledger struct {
	db     *pgxpool.Pool
	schema string // quoted
}

func newLedger(db *pgxpool.Pool, schema string) ledger {
	return ledger{db: db, schema: pgx.Identifier{schema}.Sanitize()}
}

// sql puts the ledger's schema in q, for {s}.
func (l ledger) sql(q string) string { return strings.ReplaceAll(q, "{s}", l.schema) }

// create makes the ledger's tables in its schema (which exists).
func (l ledger) create(ctx context.Context) error {
	_, err := l.db.Exec(ctx, l.sql(ledgerSchema))
	return err
}

// execer runs a statement: a pool, or the transaction of a TxGuard.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// apply is the unfenced side effect: one more row.
func (l ledger) apply(ctx context.Context, db execer, key string, t storage.Token, pid int) error {
	_, err := db.Exec(ctx, l.sql(`INSERT INTO {s}.effects (key, token, pid) VALUES ($1, $2, $3)`), key, int64(t), pid)
	return err
}

// applyFenced is the fenced side effect. It reports whether the effect was
// applied under t: false when the key's effect was applied under another
// token. The statement is atomic: of two holders, one applies.
func (l ledger) applyFenced(ctx context.Context, db execer, key string, t storage.Token, pid int) (bool, error) {
	tag, err := db.Exec(ctx, l.sql(`WITH f AS (
			INSERT INTO {s}.fence (key, token) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING RETURNING key)
		INSERT INTO {s}.effects (key, token, pid) SELECT $1, $2, $3 FROM f`), key, int64(t), pid)
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	// The fence row exists: applied under t before (this holder's own
	// statement, whose reply was lost, then retried), or under another.
	var holder int64
	if err := db.QueryRow(ctx, l.sql(`SELECT token FROM {s}.fence WHERE key = $1`), key).Scan(&holder); err != nil {
		return false, err
	}
	return holder == int64(t), nil
}

// effects returns how many effects each key has.
func (l ledger) effects(ctx context.Context) (map[string]int, error) {
	rows, err := l.db.Query(ctx, l.sql(`SELECT key, count(*) FROM {s}.effects GROUP BY key`))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

// count returns how many distinct keys have an effect.
func (l ledger) count(ctx context.Context) (int, error) {
	var n int
	err := l.db.QueryRow(ctx, l.sql(`SELECT count(DISTINCT key) FROM {s}.effects`)).Scan(&n)
	return n, err
}

// dropSchema drops the run's schema and everything in it.
func dropSchema(ctx context.Context, db *pgxpool.Pool, schema string) error {
	_, err := db.Exec(ctx, fmt.Sprintf("DROP SCHEMA IF EXISTS %s CASCADE", pgx.Identifier{schema}.Sanitize()))
	return err
}

// createLedger makes a ledger in a new schema of db.
func createLedger(ctx context.Context, db *pgxpool.Pool, schema string) (ledger, error) {
	if _, err := db.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return ledger{}, err
	}
	l := newLedger(db, schema)
	return l, l.create(ctx)
}
