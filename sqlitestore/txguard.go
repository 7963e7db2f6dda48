package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/txguard"
	"github.com/idemgo/idem/storage"
)

// TxFunc is the operation of a [TxGuard]: it makes its writes with tx and
// returns the value to store. It must not commit or roll back tx.
type TxFunc func(ctx context.Context, tx *sql.Tx) ([]byte, error)

// TxConfig is what configures a [TxGuard] beside the Guard's idem.Config,
// as pgstore's TxConfig does for its TxGuard. It has no field yet: the
// Store's Config (BusyTimeout) is the TxGuard's database, and everything
// else is the idem.Config's. NewTxGuard takes it so that its signature is
// pgstore's, and so that a field can come without changing it. The zero
// value is the only value.
type TxConfig struct{}

// TxGuard runs operations whose effects are writes to the Store's SQLite
// database exactly once per key: the claim of the key, the operation's
// writes and its outcome commit in one transaction, or none of them does.
// It is the same-transaction mode of pgstore's TxGuard, for SQLite.
//
// SQLite lets one transaction write at a time: a TxGuard's transaction
// holds the database's write lock from its claim to its commit, and every
// other write (another Do, the Store's own, another process's) waits for
// it, at most the Store's Config.BusyTimeout. Keep fn short. A duplicate
// whose outcome is committed is answered from a read, without the lock.
//
// TxGuard is safe for concurrent use and owns no goroutine.
type TxGuard struct {
	g *txguard.SQL
}

// NewTxGuard returns a TxGuard whose records are the Store s's, and whose
// transactions begin on s.DB(). cfg is the Guard's idem.Config, checked
// and defaulted as idem.New does, and means what it means for a Guard:
// keys are combined with storage.ScopedStoreKey, so a TxGuard and an
// idem.Guard over the same Store with the same Namespace share records;
// Observer and Logger see the claims, runs and outcomes; Wait is how long
// a claim that finds the key held by a plain Guard's live lease polls for
// its outcome; StoreTimeout bounds a rollback. The fields a TxGuard cannot
// honour are refused with an error naming the field (as pgstore's
// TxGuard refuses them): Lease (the transaction, not a lease, holds the
// key), MaxAttempts (a failed claim rolls back and leaves no attempt to
// count), CacheSize and CacheTTL (there is no cache) and FailOpen (fn's
// writes need the database). It also fails when another field of cfg is
// out of range, or s is nil.
func NewTxGuard(s *Store, cfg idem.Config, _ TxConfig) (*TxGuard, error) {
	if s == nil {
		return nil, errors.New("sqlitestore: NewTxGuard: store is nil")
	}
	x, err := txguard.NewExec("sqlitestore", "idem.Config", cfg)
	if err != nil {
		return nil, err
	}
	return &TxGuard{g: txguard.NewSQL(x, dialect{s})}, nil
}

// Config returns the TxGuard's idem.Config with the defaults filled in
// (the fields it refuses are zero).
func (g *TxGuard) Config() idem.Config { return g.g.Config() }

// Do runs fn at most once to completion for key, in a transaction it
// begins on the Store's database and commits:
//
//   - The transaction claims the key (a new InProgress record), fn runs
//     with it, its value is stored as the record's outcome (Completed),
//     and everything commits at once; the value is returned.
//   - fn's error marked with idem.Permanent: fn's writes are rolled back
//     to a savepoint taken after the claim, the error is stored as the
//     key's outcome (Failed) and committed; duplicates get it back.
//   - Any other error, a panic or a crash of the process: the whole
//     transaction rolls back, the claim with it, leaving no record: a
//     retry runs fn again. The error is returned as is, the panic
//     re-raised.
//   - A duplicate gets the committed outcome: the value with
//     Result.Replayed set, or the stored permanent error. One that
//     arrives while the holder's transaction is open waits for it (at
//     most the Store's BusyTimeout, else idem.ErrInProgress).
//
// payload is fingerprinted: the same key with another payload gets
// storage.ErrKeyReused. Other errors: idem.ErrInvalidKey for a key the
// Config refuses, idem.ErrInProgress when a plain idem.Guard holds the key
// with a live lease past Config.Wait, and errors wrapping
// storage.ErrStoreUnavailable when the database fails. fn must not commit or
// roll back tx, nor use it once it returned.
func (g *TxGuard) Do(ctx context.Context, key string, payload []byte, fn TxFunc) (idem.Result, error) {
	return g.g.Do(ctx, "", key, payload, fn)
}

// DoScoped is [TxGuard.Do] for key within scope (a tenant, a principal),
// as idem.Guard.DoScoped.
func (g *TxGuard) DoScoped(ctx context.Context, scope, key string, payload []byte, fn TxFunc) (idem.Result, error) {
	return g.g.Do(ctx, scope, key, payload, fn)
}

// DoTx is Do inside the caller's transaction tx, begun on the Store's
// DB(), which the caller commits: the claim, fn's writes and the outcome
// commit with the rest of tx (an outbox message), or not at all. It works
// with savepoints: when it returns an error other than fn's permanent
// one, it has rolled back its claim and fn's writes and tx is usable;
// after a permanent error, tx holds the Failed record (and not fn's
// writes), to be committed. A duplicate leaves nothing in tx.
//
// A transaction begun on another *sql.DB of the same file should be BEGIN
// IMMEDIATE (the modernc.org/sqlite driver's _txlock=immediate), as the
// Store's are: a deferred one that read before DoTx writes fails with
// SQLITE_BUSY when another connection wrote since its read.
func (g *TxGuard) DoTx(ctx context.Context, tx *sql.Tx, key string, payload []byte, fn TxFunc) (idem.Result, error) {
	return g.g.DoTx(ctx, tx, "", key, payload, fn)
}

// DoTxScoped is [TxGuard.DoTx] for key within scope.
func (g *TxGuard) DoTxScoped(ctx context.Context, tx *sql.Tx, scope, key string, payload []byte, fn TxFunc) (idem.Result, error) {
	return g.g.DoTx(ctx, tx, scope, key, payload, fn)
}

// dialect is a TxGuard's SQLite for the executor over database/sql. Its
// claims read whole results: a TxGuard stores fn's value whatever its
// size, as pgstore's does.
type dialect struct{ s *Store }

var _ txguard.Dialect = dialect{}

const unlimited = 1<<31 - 1

// Begin takes the Store's right to write and begins an IMMEDIATE
// transaction, waiting at most BusyTimeout for either.
func (d dialect) Begin(ctx context.Context) (*sql.Tx, func(), error) {
	s := d.s
	t := time.NewTimer(s.cfg.BusyTimeout)
	defer t.Stop()
	select {
	case s.write <- struct{}{}:
	case <-t.C:
		return nil, nil, d.busy(nil)
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("sqlitestore: begin: %w", context.Cause(ctx))
	}
	end := func() { <-s.write }
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		end()
		if isBusy(err) {
			return nil, nil, d.busy(err)
		}
		return nil, nil, translate(ctx, "begin", err)
	}
	return tx, end, nil
}

func (d dialect) busy(cause error) error {
	err := fmt.Errorf("%w: another transaction held the database's write lock for %v", idem.ErrInProgress, d.s.cfg.BusyTimeout)
	if cause != nil {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return fmt.Errorf("sqlitestore: begin: %w", err)
}

// Peek answers from the committed record without the write lock.
func (d dialect) Peek(ctx context.Context, c *txguard.Call) (storage.Claim, bool, error) {
	now := d.s.now()
	r, found, err := d.s.read(ctx, d.s.db, c.Args.Key, unlimited, now)
	if err != nil {
		return storage.Claim{}, true, translate(ctx, "claim", err)
	}
	cl, done, err := answer(c.Args, &r, found, unlimited, now)
	return cl, done, keyReused(err, c)
}

func (d dialect) Claim(ctx context.Context, tx *sql.Tx, c *txguard.Call) (storage.Claim, error) {
	cl, err := d.s.claimIn(ctx, tx, c.Args, unlimited)
	if isBusy(err) {
		return storage.Claim{}, fmt.Errorf("%w (key %q): %w", idem.ErrInProgress, c.Key, err)
	}
	return cl, keyReused(err, c)
}

// keyReused names the caller's key in a storage.ErrKeyReused.
func keyReused(err error, c *txguard.Call) error {
	if errors.Is(err, storage.ErrKeyReused) {
		return fmt.Errorf("%w (key %q)", err, c.Key)
	}
	return err
}

func (d dialect) Finish(ctx context.Context, tx *sql.Tx, c *txguard.Call, t storage.Token, status storage.Status, result []byte, retention time.Duration) error {
	stmt, op := d.s.q.txComplete, "complete"
	if status == storage.StatusFailed {
		stmt, op = d.s.q.txFinish, "fail"
	}
	if result == nil {
		result = []byte{}
	}
	res, err := tx.ExecContext(ctx, stmt, []byte(c.Args.Key), int64(t), int64(status), result, d.s.now()+micros(retention))
	if err != nil {
		return translate(ctx, op, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("sqlitestore: %s (key %q): %w: fn changed the record", op, c.Key, storage.ErrLeaseLost)
	}
	return nil
}

func (d dialect) Translate(op string, err error) error {
	return translate(context.Background(), op, err)
}
