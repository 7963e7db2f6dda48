package txguard

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// txFunc is the operation of a TxGuard over database/sql: it makes its
// writes with tx and returns the value to store. It must not commit or
// roll back tx.
type txFunc = func(ctx context.Context, tx *sql.Tx) ([]byte, error)

// Dialect is what a database adds to the executor over database/sql
// ([SQL]): how Do's transaction begins, and the statements of the claim
// and the outcome. Its errors are translated (the package's prefix, the
// idem sentinels) already.
type Dialect interface {
	// Begin begins Do's transaction. end is called once the transaction
	// ended, committed or rolled back. An error wrapping
	// idem.ErrInProgress says the database stayed held by another
	// transaction for longer than the dialect waits.
	Begin(ctx context.Context) (tx *sql.Tx, end func(), err error)

	// Peek answers c's claim from the committed record, without a
	// transaction, when the record answers it as it is (a duplicate,
	// another fingerprint, a plain Guard's live lease): found reports it.
	// A dialect whose claim statement locks nothing for such a record
	// may always return found false.
	Peek(ctx context.Context, c *Call) (cl storage.Claim, found bool, err error)

	// Claim claims c.Args.Key in tx, as storage.Store.Claim does, and holds
	// the key until tx ends: duplicates wait for tx (or, after the
	// dialect's lock timeout, get an error wrapping idem.ErrInProgress).
	// A fingerprint mismatch is an error wrapping idem.ErrKeyReused.
	Claim(ctx context.Context, tx *sql.Tx, c *Call) (storage.Claim, error)

	// Finish stores the outcome of claim t in tx: status Completed with
	// the value, or Failed with the encoded cause, kept retention from
	// now. It returns an error wrapping idem.ErrLeaseLost when t is not
	// the key's current token in tx (fn changed the record).
	Finish(ctx context.Context, tx *sql.Tx, c *Call, t storage.Token, status storage.Status, result []byte, retention time.Duration) error

	// Translate turns an error of database/sql in step op ("begin",
	// "savepoint", "commit") into the error the executor returns.
	Translate(op string, err error) error
}

// The savepoints of the executor over database/sql: DoTx's claim runs
// after savepointClaim, fn after savepointFn, so that a claim that fails
// or fn's permanent error roll back to them. Both PostgreSQL and SQLite
// take the standard syntax.
const (
	savepointClaim = "SAVEPOINT idem_claim"
	releaseClaim   = "RELEASE SAVEPOINT idem_claim"
	rollbackClaim  = "ROLLBACK TO SAVEPOINT idem_claim"
	savepointFn    = "SAVEPOINT idem_fn"
	rollbackFn     = "ROLLBACK TO SAVEPOINT idem_fn"
)

// SQL is a TxGuard over database/sql: the executor of pgstore's
// SQLTxGuard and of sqlitestore's TxGuard, which document it for their
// users. It is safe for concurrent use and owns no goroutine.
type SQL struct {
	x Exec
	d Dialect
}

// NewSQL returns the executor of x over d.
func NewSQL(x Exec, d Dialect) *SQL { return &SQL{x: x, d: d} }

// Config returns the executor's idem.Config, defaults filled in.
func (g *SQL) Config() idem.Config { return g.x.Cfg }

// Do runs fn at most once to completion for key within scope, in a
// transaction the dialect begins and Do commits: the claim, fn's writes
// and the outcome commit together, or nothing does. fn's permanent error
// rolls fn's writes back and stores the error; any other error or a panic
// rolls everything back, leaving no record.
func (g *SQL) Do(ctx context.Context, scope, key string, payload []byte, fn txFunc) (idem.Result, error) {
	c, err := g.x.NewCall(scope, key, payload, fn == nil)
	if err != nil {
		return idem.Result{}, err
	}
	return g.x.WaitLease(ctx, c, func() (idem.Result, error) { return g.do(ctx, c, fn) })
}

func (g *SQL) do(ctx context.Context, c *Call, fn txFunc) (idem.Result, error) {
	sent := time.Now()
	cl, found, err := g.d.Peek(ctx, c)
	if err != nil || found {
		g.x.observe(ctx, c, idem.Event{Op: idem.OpClaim, Outcome: cl.Outcome, Attempt: cl.Record.Attempt, Duration: time.Since(sent), Err: err})
		if err != nil {
			return idem.Result{}, err
		}
		res, _, err := g.x.claimed(cl, c)
		return res, err
	}
	tx, end, err := g.d.Begin(ctx)
	if err != nil {
		if errors.Is(err, idem.ErrInProgress) { // a busy database, not a failing one
			g.x.observe(ctx, c, idem.Event{Op: idem.OpClaim, Duration: time.Since(sent), Err: err})
			return idem.Result{}, err
		}
		return idem.Result{}, g.x.StoreErr(ctx, c, idem.OpClaim, err)
	}
	defer end()
	open := true // tx is to be rolled back when do returns
	defer func() {
		if open { // an error, or fn panicked
			g.x.Cleanup(ctx, c, func(context.Context) error { return tx.Rollback() })
		}
	}()
	r, res, done, err := g.claimAndRun(ctx, tx, c, sent, fn)
	if done {
		return res, err
	}
	if r.err == nil {
		open = false // a failed Commit rolls back, or leaves the outcome unknown
		if err := tx.Commit(); err != nil {
			r.err = g.d.Translate("commit", err)
		}
	}
	return Outcome(r.value, r.ferr, g.x.Finished(ctx, c, r.op, r.sent, r.err))
}

// DoTx is Do inside the caller's transaction tx, which the caller commits.
// It works with savepoints: when it returns an error other than fn's
// permanent one, it has rolled back its claim and fn's writes and tx is
// usable; after a permanent error tx holds the Failed record, not fn's
// writes. A duplicate leaves nothing in tx.
func (g *SQL) DoTx(ctx context.Context, tx *sql.Tx, scope, key string, payload []byte, fn txFunc) (idem.Result, error) {
	if tx == nil {
		return idem.Result{}, errors.New(g.x.Pkg + ": TxGuard.DoTx: tx is nil")
	}
	c, err := g.x.NewCall(scope, key, payload, fn == nil)
	if err != nil {
		return idem.Result{}, err
	}
	return g.x.WaitLease(ctx, c, func() (idem.Result, error) { return g.doTx(ctx, tx, c, fn) })
}

func (g *SQL) doTx(ctx context.Context, tx *sql.Tx, c *Call, fn txFunc) (idem.Result, error) {
	sent := time.Now()
	if _, err := tx.ExecContext(ctx, savepointClaim); err != nil {
		return idem.Result{}, g.x.StoreErr(ctx, c, idem.OpClaim, g.d.Translate("savepoint", err))
	}
	kept := false
	defer func() {
		if !kept { // an error, a duplicate, or fn panicked
			g.x.Cleanup(ctx, c, func(ctx context.Context) error {
				if _, err := tx.ExecContext(ctx, rollbackClaim); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, releaseClaim)
				return err
			})
		}
	}()
	r, res, done, err := g.claimAndRun(ctx, tx, c, sent, fn)
	if done {
		return res, err
	}
	if r.err == nil {
		if _, err := tx.ExecContext(ctx, releaseClaim); err != nil {
			r.err = g.d.Translate("savepoint", err)
		}
	}
	kept = r.err == nil
	return Outcome(r.value, r.ferr, g.x.Finished(ctx, c, r.op, r.sent, r.err))
}

// ran is what fn returned once the claim acquired the key, and how
// storing its outcome in the transaction went.
type ran struct {
	value []byte
	ferr  error     // nil or permanent
	op    idem.Op   // OpComplete or OpFail
	sent  time.Time // when the outcome was sent
	err   error     // storing the outcome
}

// claimAndRun claims c's key in tx and, when it acquired the key, runs fn
// after the savepoint idem_fn and stores its outcome in tx. When there is
// nothing to store (a duplicate, a busy key, an error, fn's retryable
// error), done is set and res, err are the answer.
func (g *SQL) claimAndRun(ctx context.Context, tx *sql.Tx, c *Call, sent time.Time, fn txFunc) (r ran, res idem.Result, done bool, err error) {
	cl, err := g.d.Claim(ctx, tx, c)
	if err == nil && cl.Outcome == storage.Acquired {
		if _, serr := tx.ExecContext(ctx, savepointFn); serr != nil {
			err = g.d.Translate("savepoint", serr)
		}
	}
	res, done, err = g.x.Run(ctx, c, cl, err, sent, func() ([]byte, error) { return fn(ctx, tx) })
	if done {
		return r, res, true, err
	}
	r.value, r.ferr = res.Value, err
	r.op, r.sent = idem.OpComplete, time.Now()
	if r.ferr == nil {
		r.err = g.d.Finish(ctx, tx, c, cl.Token, storage.StatusCompleted, r.value, g.x.Cfg.Retention)
		return r, idem.Result{}, false, nil
	}
	r.op = idem.OpFail
	if _, err := tx.ExecContext(ctx, rollbackFn); err != nil {
		r.err = g.d.Translate("savepoint", err)
		return r, idem.Result{}, false, nil
	}
	r.err = g.d.Finish(ctx, tx, c, cl.Token, storage.StatusFailed, storage.EncodeFailure(r.ferr), g.x.Cfg.FailedRetention)
	return r, idem.Result{}, false, nil
}
