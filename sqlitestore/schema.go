package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// table is a validated records table name and the quoted names derived
// from it.
type table struct {
	name  string // as given, for messages
	ident string // quoted: "t"
	index string // quoted: "t_expires_at_idx"
}

// maxName is the longest table name accepted.
const maxName = 48

// parseTable validates name: lowercase ASCII letters, digits and
// underscores, not starting with a digit, at most 48 bytes. Nothing else
// is ever put into SQL text.
func parseTable(name string) (table, error) {
	if name == "" {
		name = DefaultTable
	}
	if len(name) > maxName {
		return table{}, fmt.Errorf("table %q: longer than %d bytes", name, maxName)
	}
	for i, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return table{}, fmt.Errorf("table %q: only lowercase ASCII letters, digits and underscores, not starting with a digit", name)
		}
	}
	return table{name: name, ident: `"` + name + `"`, index: `"` + name + `_expires_at_idx"`}, nil
}

// Migrate creates the records table named table ("" for [DefaultTable])
// and its index in db, a database of the modernc.org/sqlite driver, unless
// they exist. It is idempotent; [Open] runs it. Use it to create the table
// with a migration tool of one's own, or in a transaction of one's own
// (db may be a *sql.Tx).
func Migrate(ctx context.Context, db interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}, table string) error {
	t, err := parseTable(table)
	if err != nil {
		return fmt.Errorf("sqlitestore: Migrate: %w", err)
	}
	return migrate(ctx, db, t)
}

func migrate(ctx context.Context, db interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}, t table) error {
	for _, stmt := range []string{t.createTable(), t.createIndex()} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return translate(ctx, "migrate", err)
		}
	}
	return nil
}

// createTable is the records table: one row per store key. Times are
// microseconds since the Unix epoch, of the Store's clock (Config.Now).
// A rowid table, not WITHOUT ROWID: a row holds a result of up to
// MaxValueSize bytes, and SQLite keeps large rows of a WITHOUT ROWID
// table in its index pages.
func (t table) createTable() string {
	return `CREATE TABLE IF NOT EXISTS ` + t.ident + ` (
	key         BLOB    NOT NULL PRIMARY KEY, -- storage.StoreKey: any bytes, compared byte for byte
	status      INTEGER NOT NULL,             -- 1 InProgress, 2 Completed, 3 Failed (storage.Status)
	token       INTEGER NOT NULL,             -- the current claim's fencing token; 0 once released
	attempt     INTEGER NOT NULL,             -- from 1
	fingerprint BLOB    NOT NULL,
	lease_until INTEGER,                      -- InProgress: when the holder's lease ends; NULL on an outcome
	retention   INTEGER NOT NULL,             -- the claim's retention, kept after an extended lease
	result      BLOB,                         -- Completed: the value; Failed: the encoded permanent error
	expires_at  INTEGER NOT NULL              -- when the record is forgotten
)`
}

func (t table) createIndex() string {
	return `CREATE INDEX IF NOT EXISTS ` + t.index + ` ON ` + t.ident + ` (expires_at)`
}

// queries are a Store's statements for its table. Parameters are numbered
// (?NNN), so that one value serves several places.
type queries struct {
	read, put, finish, release, extend, delete, reap string
	scan                                             string
	txFinish, txComplete                             string
}

// holder is the fencing condition of every holder's call: ?1 key, ?2 the
// claim's token (never 0: the caller checks), ?3 now. The record is in
// progress and not expired; a lease that ran out does not matter, the
// token stays current until someone takes over.
const holder = `key = ?1 AND token = ?2 AND status = 1 AND expires_at > ?3`

func newQueries(t table) queries {
	return queries{
		// ?1 key, ?2 the longest result returned, ?3 now.
		read: `SELECT status, token, attempt, fingerprint, lease_until, retention,
	CASE WHEN length(result) <= ?2 THEN result END, length(result), expires_at
FROM ` + t.ident + ` WHERE key = ?1 AND expires_at > ?3`,
		// Every column of a claim's record, new or replacing one.
		put: `INSERT INTO ` + t.ident + ` (key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (key) DO UPDATE SET status = excluded.status, token = excluded.token, attempt = excluded.attempt,
	fingerprint = excluded.fingerprint, lease_until = excluded.lease_until, retention = excluded.retention,
	result = excluded.result, expires_at = excluded.expires_at`,
		// Complete and Fail: ?4 status, ?5 result, ?6 expires_at.
		finish: `UPDATE ` + t.ident + ` SET status = ?4, result = ?5, lease_until = NULL, expires_at = ?6 WHERE ` + holder,
		// The lease ends now, and no token is current.
		release: `UPDATE ` + t.ident + ` SET token = 0, lease_until = ?3 WHERE ` + holder,
		// ?4 the new lease end; the record stays the claim's retention
		// after it.
		extend: `UPDATE ` + t.ident + ` SET lease_until = ?4, expires_at = max(expires_at, ?4 + retention) WHERE ` + holder,
		delete: `DELETE FROM ` + t.ident + ` WHERE key = ?1`,
		// Store.Scan's page: the live records whose key follows ?1 (from
		// ?1 on, when ?3), in key order, at most ?5 of them; ?2 the
		// longest result returned, ?4 now.
		scan: `SELECT key, status, token, attempt, fingerprint, lease_until, retention,
	CASE WHEN length(result) <= ?2 THEN result END, length(result), expires_at
FROM ` + t.ident + ` WHERE (key > ?1 OR (?3 AND key = ?1)) AND expires_at > ?4 ORDER BY key LIMIT ?5`,
		// ?1 now, ?2 the most rows deleted.
		reap: `DELETE FROM ` + t.ident + ` WHERE rowid IN (
	SELECT rowid FROM ` + t.ident + ` WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)`,
		// A TxGuard's outcomes, in the transaction of its claim, which
		// has held the write lock since: whether the record expired since
		// does not matter. ?1 key, ?2 token, ?3 status, ?4 result, ?5
		// expires_at; a completed record keeps a later expiry.
		txFinish: `UPDATE ` + t.ident + ` SET status = ?3, result = ?4, lease_until = NULL, expires_at = ?5
WHERE key = ?1 AND token = ?2 AND status = 1`,
		txComplete: `UPDATE ` + t.ident + ` SET status = ?3, result = ?4, lease_until = NULL, expires_at = max(expires_at, ?5)
WHERE key = ?1 AND token = ?2 AND status = 1`,
	}
}

// errNoTable is in the chain of the error of a statement on a table that
// does not exist.
var errNoTable = errors.New("the records table is missing (run sqlitestore.Migrate)")

func isNoTable(err error) bool { return strings.Contains(err.Error(), "no such table") }
