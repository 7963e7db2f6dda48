package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/txguard"
	"github.com/idemgo/idem/storage"
	"github.com/jackc/pgx/v5/stdlib"
)

// SQLTxFunc is the operation of an [SQLTxGuard]: it makes its writes with
// tx and returns the value to store. It must not commit or roll back tx.
type SQLTxFunc func(ctx context.Context, tx *sql.Tx) ([]byte, error)

// SQLTxGuard is [TxGuard] for code written against database/sql (sqlc in
// database/sql mode, sqlx, GORM, ent, bun): the claim of the key, the
// operation's writes through a *sql.Tx and its outcome commit in one
// PostgreSQL transaction, or none of them does. Its db is a *sql.DB of
// pgx's database/sql driver, github.com/jackc/pgx/v5/stdlib
// (sql.Open("pgx", url), or stdlib.OpenDBFromPool).
//
// It runs the statements of [TxGuard], one round trip each (database/sql
// has no pipeline): BEGIN, the claim, a savepoint, fn's statements, the
// outcome and COMMIT. It answers as TxGuard does, takes the same
// idem.Config and [TxConfig] (refusing the same fields), and shares records with TxGuard and idem.Guard over a
// [Store] of the same table and namespace. What Go cannot enforce on a
// *sql.Tx, fn must keep to: it must not commit or roll back tx, nor use
// it once it returned.
//
// SQLTxGuard is safe for concurrent use and owns no goroutine.
type SQLTxGuard struct {
	g   *txguard.SQL
	d   *sqlDialect
	cfg TxConfig
}

var _ txguard.Dialect = (*sqlDialect)(nil)

// NewSQLTxGuard returns an SQLTxGuard that begins its transactions on db
// (which may be nil if only [SQLTxGuard.DoTx] is used). It fails as
// [NewTxGuard] does, or when db is not a database of pgx's stdlib driver;
// the error names the field.
func NewSQLTxGuard(db *sql.DB, cfg idem.Config, txc TxConfig) (*SQLTxGuard, error) {
	t, err := parseTable(txc.Table)
	if err != nil {
		return nil, fmt.Errorf("pgstore: TxConfig.Table: %w", err)
	}
	if db != nil {
		if _, ok := db.Driver().(*stdlib.Driver); !ok {
			return nil, fmt.Errorf("pgstore: NewSQLTxGuard: db's driver is %T, want pgx's stdlib driver (github.com/jackc/pgx/v5/stdlib)", db.Driver())
		}
	}
	txc, x, err := checkTxConfig(cfg, txc)
	if err != nil {
		return nil, err
	}
	txc.Table = t.name
	d := &sqlDialect{db: db, q: newQueries(t), lockTimeout: txc.LockTimeout}
	d.setLockTimeout, _ = t.setLockTimeout(txc.LockTimeout.Milliseconds())
	return &SQLTxGuard{g: txguard.NewSQL(x, d), d: d, cfg: txc}, nil
}

// Config returns the SQLTxGuard's idem.Config with the defaults filled in
// (the fields it refuses are zero).
func (g *SQLTxGuard) Config() idem.Config { return g.g.Config() }

// TxConfig returns the SQLTxGuard's TxConfig with the defaults filled in.
func (g *SQLTxGuard) TxConfig() TxConfig { return g.cfg }

// Do is [TxGuard.Do] over database/sql: fn runs at most once to completion
// for key, in a READ COMMITTED transaction Do begins on the SQLTxGuard's
// db and commits with fn's writes and the outcome. fn's permanent error
// (idem.Permanent) rolls its writes back and is stored; any other error,
// a panic or a lost connection rolls everything back, leaving no record.
// A duplicate waits for the holder's transaction (at most LockTimeout,
// else idem.ErrInProgress) and replays its committed outcome. Errors as
// for TxGuard.Do.
func (g *SQLTxGuard) Do(ctx context.Context, key string, payload []byte, fn SQLTxFunc) (idem.Result, error) {
	return g.DoScoped(ctx, "", key, payload, fn)
}

// DoScoped is [SQLTxGuard.Do] for key within scope, as
// [TxGuard.DoScoped].
func (g *SQLTxGuard) DoScoped(ctx context.Context, scope, key string, payload []byte, fn SQLTxFunc) (idem.Result, error) {
	if g.d.db == nil {
		return idem.Result{}, errors.New("pgstore: SQLTxGuard.Do: the SQLTxGuard has no db (use DoTx)")
	}
	return g.g.Do(ctx, scope, key, payload, fn)
}

// DoTx is [TxGuard.DoTx] over database/sql: Do inside the caller's
// transaction tx, which the caller commits, so that more writes (an outbox
// message, see outbox.EnqueueSQL) commit with the record. It works with
// savepoints; tx should be READ COMMITTED.
func (g *SQLTxGuard) DoTx(ctx context.Context, tx *sql.Tx, key string, payload []byte, fn SQLTxFunc) (idem.Result, error) {
	return g.DoTxScoped(ctx, tx, "", key, payload, fn)
}

// DoTxScoped is [SQLTxGuard.DoTx] for key within scope.
func (g *SQLTxGuard) DoTxScoped(ctx context.Context, tx *sql.Tx, scope, key string, payload []byte, fn SQLTxFunc) (idem.Result, error) {
	return g.g.DoTx(ctx, tx, scope, key, payload, fn)
}

// sqlDialect is TxGuard's SQL for the executor over database/sql.
type sqlDialect struct {
	db             *sql.DB
	q              queries
	setLockTimeout string
	lockTimeout    time.Duration
}

func (d *sqlDialect) Begin(ctx context.Context) (*sql.Tx, func(), error) {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, nil, translate("begin", err)
	}
	return tx, func() {}, nil
}

// Peek finds nothing: the claim statement reads first, and locks and
// writes nothing for a record that answers it as it is.
func (d *sqlDialect) Peek(context.Context, *txguard.Call) (storage.Claim, bool, error) {
	return storage.Claim{}, false, nil
}

// Claim sets the guard's lock_timeout, which the claim's last column
// restores once it has its row, and claims as TxGuard does.
func (d *sqlDialect) Claim(ctx context.Context, tx *sql.Tx, c *txCall) (storage.Claim, error) {
	if _, err := tx.ExecContext(ctx, d.setLockTimeout); err != nil {
		return storage.Claim{}, translate("claim", err)
	}
	return claimLoop(d.q, c, d.lockTimeout, func(claim string, params []any) (r claimRow, found bool, err error) {
		var restored any
		err = tx.QueryRowContext(ctx, claim, params...).Scan(&r.status, &r.token, &r.attempt, &r.sameFingerprint,
			&r.leaseUntil, &r.result, &r.expiresAt, &r.acquired, &restored)
		if errors.Is(err, sql.ErrNoRows) {
			return r, false, nil
		}
		return r, err == nil, err
	})
}

func (d *sqlDialect) Finish(ctx context.Context, tx *sql.Tx, c *txCall, t storage.Token, status storage.Status, result []byte, retention time.Duration) error {
	stmt, op := d.q.txComplete, "complete"
	if status == storage.StatusFailed {
		stmt, op = d.q.txFail, "fail"
	}
	var one int
	err := tx.QueryRowContext(ctx, stmt, []byte(c.Args.Key), int64(t), result, micros(retention)).Scan(&one)
	if isNoOutcomeRow(err) {
		return fmt.Errorf("pgstore: %s (key %q): %w: fn changed the record", op, c.Key, storage.ErrLeaseLost)
	}
	return translate(op, err)
}

func (d *sqlDialect) Translate(op string, err error) error { return translate(op, err) }
