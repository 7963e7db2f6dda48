package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Beginner starts transactions: *pgxpool.Pool and *pgx.Conn satisfy it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// TxFunc is the operation of a [TxGuard]: it makes its writes with tx and
// returns the value to store. It must not commit or roll back tx.
type TxFunc func(ctx context.Context, tx pgx.Tx) ([]byte, error)

// TxConfig configures a [TxGuard]. The zero value means every default.
type TxConfig struct {
	// Table is the records table, as [Config.Table]. Default [DefaultTable].
	Table string

	// Namespace separates the keys of different operations, as
	// idem.Config.Namespace; keys are combined with idem.StoreKey, so a
	// TxGuard and an idem.Guard with the same namespace and table share
	// records. Default "".
	Namespace string

	// Retention is how long a completed outcome is kept and replayed.
	// Default idem.DefaultRetention (24h).
	Retention time.Duration

	// FailedRetention is how long a permanent failure is kept and replayed.
	// Default: Retention.
	FailedRetention time.Duration

	// LockTimeout is how long a duplicate waits for the transaction that
	// holds its key to end, before Do returns idem.ErrInProgress. It is
	// PostgreSQL's lock_timeout, set for the claim statement only. Default
	// 5s; at least 1ms.
	LockTimeout time.Duration

	// Fingerprint appends the fingerprint of payload to dst, as
	// idem.Config.Fingerprint. Default idem.SHA256Fingerprint.
	Fingerprint func(dst, payload []byte) []byte

	// MaxKeyLen is the longest key accepted, in bytes. Default
	// idem.DefaultMaxKeyLen (255).
	MaxKeyLen int
}

// DefaultLockTimeout is the default [TxConfig.LockTimeout].
const DefaultLockTimeout = 5 * time.Second

// txLease is the lease of a transactional claim. No one else ever sees that
// claim in progress: its row commits Completed or Failed, or not at all.
const txLease = time.Hour

// TxGuard runs operations whose effects are writes to the same PostgreSQL
// database exactly once per key: the claim of the key, the operation's
// writes and its outcome commit in one transaction, or none of them does.
// Create one with [NewTxGuard]; it is safe for concurrent use and owns no
// goroutine.
type TxGuard struct {
	db  Beginner
	cfg TxConfig
	q   queries
	// The claim waits at most LockTimeout: the statements before it save
	// the transaction's lock_timeout in a placeholder setting and set the
	// guard's, the one after it restores the saved value, so fn's
	// statements wait as the caller configured. Do's BEGIN carries the
	// first two (one message, simple protocol), DoTx pipelines them.
	begin, saveLockTimeout, setLockTimeout, restoreLockTimeout string
}

// NewTxGuard returns a TxGuard that begins its transactions on db (which
// may be nil if only [TxGuard.DoTx] is used). It fails when a field of cfg
// is out of range; the error names it.
func NewTxGuard(db Beginner, cfg TxConfig) (*TxGuard, error) {
	t, err := parseTable(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("pgstore: TxConfig.Table: %w", err)
	}
	switch {
	case cfg.Retention < 0:
		return nil, fmt.Errorf("pgstore: TxConfig.Retention %v: must not be negative", cfg.Retention)
	case cfg.FailedRetention < 0:
		return nil, fmt.Errorf("pgstore: TxConfig.FailedRetention %v: must not be negative", cfg.FailedRetention)
	case cfg.LockTimeout < 0 || (cfg.LockTimeout > 0 && cfg.LockTimeout < time.Millisecond):
		return nil, fmt.Errorf("pgstore: TxConfig.LockTimeout %v: must be at least 1ms", cfg.LockTimeout)
	case cfg.MaxKeyLen < 0:
		return nil, fmt.Errorf("pgstore: TxConfig.MaxKeyLen %d: must not be negative", cfg.MaxKeyLen)
	}
	cfg.Retention = cmp.Or(cfg.Retention, idem.DefaultRetention)
	cfg.FailedRetention = cmp.Or(cfg.FailedRetention, cfg.Retention)
	cfg.LockTimeout = cmp.Or(cfg.LockTimeout, DefaultLockTimeout)
	cfg.MaxKeyLen = cmp.Or(cfg.MaxKeyLen, idem.DefaultMaxKeyLen)
	if cfg.Fingerprint == nil {
		cfg.Fingerprint = idem.SHA256Fingerprint
	}
	g := &TxGuard{
		db:              db,
		cfg:             cfg,
		q:               newQueries(t),
		saveLockTimeout: `SELECT set_config('pgstore.lock_timeout', current_setting('lock_timeout'), true)`,
		// An integer literal: nothing of the caller's enters the text.
		setLockTimeout:     fmt.Sprintf("SET LOCAL lock_timeout = %d", cfg.LockTimeout.Milliseconds()),
		restoreLockTimeout: `SELECT set_config('lock_timeout', current_setting('pgstore.lock_timeout'), true)`,
	}
	g.begin = "BEGIN ISOLATION LEVEL READ COMMITTED; " + g.saveLockTimeout + "; " + g.setLockTimeout
	return g, nil
}

// Do runs fn at most once to completion for key, in a READ COMMITTED
// transaction it begins on the TxGuard's db and commits:
//
//   - The transaction first claims the key: it inserts the key's record,
//     InProgress, and so holds its row lock until it ends. fn runs, its
//     value is stored as the record's outcome (Completed) and everything
//     commits at once; the value is returned.
//   - fn's error marked with idem.Permanent: fn's writes are rolled back to
//     a savepoint taken after the claim, the error is stored as the key's
//     outcome (Failed) in the same transaction, which commits; the error
//     is returned and duplicates get it back.
//   - Any other error, a panic, a crash or a lost connection: the whole
//     transaction rolls back, the claim with it, leaving no record: a retry
//     runs fn again. The error is returned as is, the panic re-raised.
//   - A duplicate arriving while the holder's transaction is open waits on
//     the row lock (at most LockTimeout, else idem.ErrInProgress) and then
//     gets the committed outcome: the value with Result.Replayed set, or
//     the stored permanent error; or, if the holder rolled back, claims the
//     key itself.
//
// payload is fingerprinted: the same key with another payload gets
// idem.ErrKeyReused. Other errors: idem.ErrInvalidKey for a key that is
// empty or too long, idem.ErrInProgress when a plain idem.Guard holds the
// key with a live lease, and errors wrapping idem.ErrStoreUnavailable when
// the database fails. An error from the final commit leaves the outcome
// unknown to this caller (it committed or not): a retry finds out.
//
// fn may run more than once over time (retryable errors, crashes), but its
// writes commit once. Attempts are not counted in this mode (a rolled back
// claim leaves nothing to count): return a permanent error to stop a
// poison message.
func (g *TxGuard) Do(ctx context.Context, key string, payload []byte, fn TxFunc) (idem.Result, error) {
	if g.db == nil {
		return idem.Result{}, errors.New("pgstore: TxGuard.Do: the TxGuard has no db (use DoTx)")
	}
	if err := g.check(key, fn); err != nil {
		return idem.Result{}, err
	}
	tx, err := g.db.BeginTx(ctx, pgx.TxOptions{BeginQuery: g.begin})
	if err != nil {
		return idem.Result{}, translate("begin", err)
	}
	done := false
	defer func() {
		if !done { // an error, or fn panicked
			rollback(ctx, tx)
		}
	}()
	res, commit, err := g.run(ctx, tx, key, payload, fn, false)
	if !commit {
		return res, err
	}
	done = true
	if cerr := tx.Commit(ctx); cerr != nil {
		return idem.Result{}, errors.Join(err, translate("commit", cerr))
	}
	return res, err
}

// DoTx is Do inside the caller's transaction tx, which the caller commits:
// the claim, fn's writes and the outcome commit with the rest of tx (a
// Kafka offset, an outbox message), or not at all. DoTx works with
// savepoints: when it returns an error other than fn's permanent one, it
// has rolled back its claim and fn's writes and tx is usable; after a
// permanent error, tx holds the Failed record (and not fn's writes), to be
// committed. The outcome's row stays locked until tx ends, so duplicates
// wait for the caller's commit.
//
// tx should be READ COMMITTED: under REPEATABLE READ or SERIALIZABLE a
// duplicate that waited for the holder fails with a serialization error
// (wrapping idem.ErrStoreUnavailable) instead of replaying the outcome, and
// the caller must retry its whole transaction.
func (g *TxGuard) DoTx(ctx context.Context, tx pgx.Tx, key string, payload []byte, fn TxFunc) (idem.Result, error) {
	if tx == nil {
		return idem.Result{}, errors.New("pgstore: TxGuard.DoTx: tx is nil")
	}
	if err := g.check(key, fn); err != nil {
		return idem.Result{}, err
	}
	done := false
	defer func() {
		if !done { // fn panicked
			rollbackTo(ctx, tx)
		}
	}()
	res, keep, err := g.run(ctx, tx, key, payload, fn, true)
	done = true
	if !keep {
		rollbackTo(ctx, tx)
		return res, err
	}
	if _, rerr := tx.Exec(ctx, "RELEASE SAVEPOINT pgstore_claim"); rerr != nil {
		return idem.Result{}, errors.Join(err, translate("release savepoint", rerr))
	}
	return res, err
}

func (g *TxGuard) check(key string, fn TxFunc) error {
	switch {
	case fn == nil:
		return errors.New("pgstore: TxGuard: fn is nil")
	case len(key) == 0:
		return fmt.Errorf("%w: empty", idem.ErrInvalidKey)
	case len(key) > g.cfg.MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", idem.ErrInvalidKey, len(key), g.cfg.MaxKeyLen)
	}
	return nil
}

// run claims key in tx and runs fn if the claim acquired it. keep reports
// whether tx holds an outcome to commit (fn's value or its permanent
// error); if not, the caller rolls back (all of tx in Do, to the savepoint
// pgstore_claim in DoTx). nested is true for DoTx, whose claim starts with
// that savepoint.
func (g *TxGuard) run(ctx context.Context, tx pgx.Tx, key string, payload []byte, fn TxFunc, nested bool) (res idem.Result, keep bool, err error) {
	a := idem.ClaimArgs{
		Key:         idem.StoreKey(g.cfg.Namespace, key),
		Fingerprint: g.cfg.Fingerprint(nil, payload),
		Lease:       txLease,
		Retention:   g.cfg.FailedRetention,
	}
	cl, err := g.claim(ctx, tx, key, a, nested)
	if err != nil {
		return idem.Result{}, false, err
	}
	switch cl.Outcome {
	case idem.Duplicate:
		if cl.Record.Status == idem.StatusFailed {
			return idem.Result{Replayed: true}, false, idem.DecodeFailure(cl.Record.Result)
		}
		return idem.Result{Value: cl.Record.Result, Replayed: true}, false, nil
	case idem.Busy:
		return idem.Result{}, false, fmt.Errorf("%w (key %q, attempt %d): held by a lease", idem.ErrInProgress, key, cl.Record.Attempt)
	}

	value, ferr := fn(ctx, tx)
	switch {
	case ferr == nil:
		tag, err := tx.Exec(ctx, g.q.finish, []byte(a.Key), int64(cl.Token), statusCompleted, value, micros(g.cfg.Retention))
		if err != nil {
			return idem.Result{}, false, translate("complete", err)
		}
		if tag.RowsAffected() != 1 {
			return idem.Result{}, false, fmt.Errorf("pgstore: complete (key %q): %w: fn changed the record", key, idem.ErrLeaseLost)
		}
		return idem.Result{Value: value}, true, nil
	case idem.IsPermanent(ferr):
		b := &pgx.Batch{}
		b.Queue("ROLLBACK TO SAVEPOINT pgstore_fn")
		b.Queue(g.q.finish, []byte(a.Key), int64(cl.Token), statusFailed, idem.EncodeFailure(ferr), micros(g.cfg.FailedRetention))
		br := tx.SendBatch(ctx, b)
		_, err := br.Exec()
		var tag pgconn.CommandTag
		if err == nil {
			tag, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return idem.Result{}, false, errors.Join(ferr, translate("fail", err))
		}
		if tag.RowsAffected() != 1 {
			return idem.Result{}, false, errors.Join(ferr, fmt.Errorf("pgstore: fail (key %q): %w: fn changed the record", key, idem.ErrLeaseLost))
		}
		return idem.Result{}, true, ferr
	}
	return idem.Result{}, false, ferr
}

// claim claims a (for the caller's key) in tx, in one round trip: the
// statements are pipelined. After it the transaction holds the savepoint
// pgstore_fn, and in DoTx pgstore_claim before it.
func (g *TxGuard) claim(ctx context.Context, tx pgx.Tx, key string, a idem.ClaimArgs, nested bool) (idem.Claim, error) {
	b := &pgx.Batch{}
	if nested {
		b.Queue("SAVEPOINT pgstore_claim")
		b.Queue(g.saveLockTimeout)
		b.Queue(g.setLockTimeout)
	}
	claimAt := b.Len()
	b.Queue(g.q.claim, []byte(a.Key), fingerprint(a), micros(a.Lease), micros(a.Retention), int32(0), tooManyAttempts)
	b.Queue(g.restoreLockTimeout)
	b.Queue("SAVEPOINT pgstore_fn")
	br := tx.SendBatch(ctx, b)
	var r claimRow
	var err error
	for i := 0; i < b.Len() && err == nil; i++ {
		if i == claimAt {
			err = br.QueryRow().Scan(&r.status, &r.token, &r.attempt, &r.sameFingerprint, &r.leaseUntil, &r.result, &r.expiresAt, &r.acquired)
		} else {
			_, err = br.Exec()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "55P03" {
			return idem.Claim{}, fmt.Errorf("%w (key %q): its transaction did not end within %v", idem.ErrInProgress, key, g.cfg.LockTimeout)
		}
		return idem.Claim{}, translate("claim", err)
	}
	cl, err := r.claim(a)
	if errors.Is(err, idem.ErrKeyReused) {
		err = fmt.Errorf("%w (key %q)", err, key)
	}
	return cl, err
}

// cleanupTimeout bounds a rollback, which runs detached from the caller's
// cancellation: a caller that gave up must not leave a transaction open.
const cleanupTimeout = 5 * time.Second

func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = tx.Rollback(ctx) // on failure pgx closes the connection, which ends the transaction
}

// rollbackTo undoes DoTx's claim and fn's writes, leaving tx usable.
func rollbackTo(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, _ = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT pgstore_claim; RELEASE SAVEPOINT pgstore_claim")
}
