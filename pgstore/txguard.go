package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/txguard"
	"github.com/idemgo/idem/storage"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Beginner starts transactions: *pgxpool.Pool and *pgx.Conn satisfy it.
// Over those two, [TxGuard.Do] pipelines BEGIN with its first statements
// (pgx's Batch.BeginTx) instead of calling BeginTx.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// TxFunc is the operation of a [TxGuard]: it makes its writes with tx and
// returns the value to store. It must not commit or roll back tx.
type TxFunc func(ctx context.Context, tx pgx.Tx) ([]byte, error)

// TxConfig is what a [TxGuard] (and an [SQLTxGuard]) adds to the
// idem.Config it takes: the settings of PostgreSQL. The zero value means
// every default.
type TxConfig struct {
	// Table is the records table, as [Config.Table]. Default [DefaultTable].
	Table string

	// LockTimeout is how long a duplicate waits for the transaction that
	// holds its key to end, before Do returns idem.ErrInProgress. It is
	// PostgreSQL's lock_timeout, set for the claim statement only. Default
	// 5s; at least 1ms.
	LockTimeout time.Duration
}

// DefaultLockTimeout is the default [TxConfig.LockTimeout].
const DefaultLockTimeout = 5 * time.Second

// TxGuard runs operations whose effects are writes to the same PostgreSQL
// database exactly once per key: the claim of the key, the operation's
// writes and its outcome commit in one transaction, or none of them does.
// Create one with [NewTxGuard]; it is safe for concurrent use and owns no
// goroutine.
//
//	txg, err := pgstore.NewTxGuard(pool, idem.Config{Namespace: "orders"}, pgstore.TxConfig{})
//	res, err := txg.Do(ctx, key, payload, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
//		_, err := tx.Exec(ctx, "INSERT INTO orders (id, amount) VALUES ($1, $2)", id, amount)
//		return []byte(id), err
//	})
//
// [TxGuard.DoTx] runs inside a transaction of the caller's instead, so that
// more writes (a Kafka offset, an outbox message) commit with the record,
// and [TxGuard.DoBatchTx] runs a batch of operations in one.
type TxGuard struct {
	db  Beginner
	cfg TxConfig
	x   txguard.Exec // what every transactional executor shares
	q   queries
	// The claim waits at most LockTimeout: the statement before it saves
	// the transaction's lock_timeout in a placeholder setting and sets the
	// guard's; the claim's RETURNING list, computed once the claim has its
	// row (and so after any wait), restores the saved value, so fn's
	// statements wait as the caller configured. A claim that fails aborts
	// the transaction (or, in DoTx, is rolled back to a savepoint, which
	// undoes the settings too). begin carries the first (one message,
	// simple protocol) for a Beginner that is neither a pool nor a conn.
	begin, setLockTimeout string
}

// NewTxGuard returns a TxGuard that begins its transactions on db (which
// may be nil if only [TxGuard.DoTx] and [TxGuard.DoBatchTx] are used). cfg
// is the idem.Config a Guard takes, checked the same way; keys are
// combined with storage.ScopedStoreKey, so a TxGuard and an idem.Guard with
// the same namespace and table share records. Every field means what it
// means for a Guard, or is refused with an error naming it:
//
//   - Namespace, Retention, FailedRetention, Fingerprint, MaxKeyLen,
//     ValidateKey: as for a Guard.
//   - Wait: how long a claim that finds the key held by a plain Guard's
//     live lease polls for its outcome (Do, DoTx) before it returns
//     idem.ErrInProgress. A key held by another transaction is waited for
//     on its row lock, at most TxConfig.LockTimeout.
//   - Observer and Logger: the TxGuard reports its claims, runs and
//     outcomes (idem.OpClaim, OpRun, OpComplete, OpFail, OpRelease for a
//     rollback) and logs outcomes that did not commit.
//   - StoreTimeout: bounds a rollback, which runs detached from the
//     caller's cancellation.
//   - Lease is refused: the transaction's row lock, not a lease, holds the
//     key from the claim to the commit, and a holder that dies frees it as
//     soon as the server ends its transaction.
//   - MaxAttempts is refused: a claim whose operation fails rolls back
//     with it, and leaves no attempt to count. Return a permanent error
//     (idem.Permanent) to stop an operation that must not run again.
//   - CacheSize and CacheTTL are refused: duplicates read the committed
//     record. FailOpen is refused: fn's writes need the database.
//
// It also fails when a field of txc is out of range; the error names it.
func NewTxGuard(db Beginner, cfg idem.Config, txc TxConfig) (*TxGuard, error) {
	t, err := parseTable(txc.Table)
	if err != nil {
		return nil, fmt.Errorf("pgstore: TxConfig.Table: %w", err)
	}
	txc, x, err := checkTxConfig(cfg, txc)
	if err != nil {
		return nil, err
	}
	txc.Table = t.name
	g := &TxGuard{
		db:  db,
		cfg: txc,
		x:   x,
		q:   newQueries(t),
	}
	g.setLockTimeout, g.begin = t.setLockTimeout(txc.LockTimeout.Milliseconds())
	return g, nil
}

// checkTxConfig checks cfg and txc's fields but Table and fills in the
// defaults.
func checkTxConfig(cfg idem.Config, txc TxConfig) (TxConfig, txguard.Exec, error) {
	if txc.LockTimeout < 0 || (txc.LockTimeout > 0 && txc.LockTimeout < time.Millisecond) {
		return txc, txguard.Exec{}, fmt.Errorf("pgstore: TxConfig.LockTimeout %v: must be at least 1ms", txc.LockTimeout)
	}
	x, err := txguard.NewExec("pgstore", "idem.Config", cfg)
	if err != nil {
		return txc, x, err
	}
	txc.LockTimeout = cmp.Or(txc.LockTimeout, DefaultLockTimeout)
	return txc, x, nil
}

// Config returns the TxGuard's idem.Config with the defaults filled in (the
// fields it refuses are zero).
func (g *TxGuard) Config() idem.Config { return g.x.Cfg }

// TxConfig returns the TxGuard's TxConfig with the defaults filled in.
func (g *TxGuard) TxConfig() TxConfig { return g.cfg }

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
// storage.ErrKeyReused. Other errors: idem.ErrInvalidKey for a key the
// Config refuses (idem.Config.CheckKey), idem.ErrInProgress when a plain
// idem.Guard holds the key with a live lease past Config.Wait, and errors
// wrapping storage.ErrStoreUnavailable when the database fails. An error from
// the final commit leaves the outcome unknown to this caller (it committed
// or not): a retry finds out.
//
// fn must not commit or roll back tx (both return an error), and tx is
// closed once fn returned. Over a *pgxpool.Pool or a *pgx.Conn, Do costs
// three round trips besides fn's: BEGIN pipelined with the claim, and the
// outcome with COMMIT. A duplicate costs two, BEGIN with the claim and
// ROLLBACK: its claim reads the committed outcome and writes nothing, so
// its transaction has no ID and nothing to commit. A completed record is
// kept at least Retention after its commit, and at most 30s longer.
//
// fn may run more than once over time (retryable errors, crashes), but its
// writes commit once. Attempts are not counted in this mode (a rolled back
// claim leaves nothing to count): return a permanent error to stop a
// poison message.
func (g *TxGuard) Do(ctx context.Context, key string, payload []byte, fn TxFunc) (idem.Result, error) {
	return g.DoScoped(ctx, "", key, payload, fn)
}

// DoScoped is [TxGuard.Do] for key within scope (a tenant, a principal),
// as idem.Guard.DoScoped: the same key in two scopes names two operations,
// and the record is the one a Guard's DoScoped with the same namespace,
// scope and key uses.
func (g *TxGuard) DoScoped(ctx context.Context, scope, key string, payload []byte, fn TxFunc) (idem.Result, error) {
	if g.db == nil {
		return idem.Result{}, errors.New("pgstore: TxGuard.Do: the TxGuard has no db (use DoTx)")
	}
	c, err := g.x.NewCall(scope, key, payload, fn == nil)
	if err != nil {
		return idem.Result{}, err
	}
	return g.x.WaitLease(ctx, c, func() (idem.Result, error) {
		switch db := g.db.(type) {
		case *pgxpool.Pool:
			conn, err := db.Acquire(ctx)
			if err != nil {
				return idem.Result{}, g.x.StoreErr(ctx, c, idem.OpClaim, translate("begin", err))
			}
			defer conn.Release() // a connection left in a transaction is closed, not reused
			return g.doPipelined(ctx, conn.Conn(), c, fn)
		case *pgx.Conn:
			return g.doPipelined(ctx, db, c, fn)
		}
		return g.doBegun(ctx, c, fn)
	})
}

// doPipelined is Do on a connection of its own, in three round trips
// besides fn's: BEGIN is pipelined with the claim (pgx's Batch.BeginTx),
// and the outcome with COMMIT. The outcome statement raises an error when
// it matches no row, so the COMMIT behind it never commits fn's writes
// without their outcome: the server skips the rest of a pipeline after an
// error, and the transaction rolls back.
func (g *TxGuard) doPipelined(ctx context.Context, conn *pgx.Conn, c *txCall, fn TxFunc) (idem.Result, error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	claimAt := g.queueClaim(b, c.Args, false)
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	open := true // tx is to be rolled back when Do returns
	defer func() {
		if open { // an error, or fn panicked
			g.rollback(ctx, c, tx)
		}
	}()
	r, res, done, err := g.claimAndRun(ctx, tx, br, b.Len(), claimAt, c, func() ([]byte, error) { return callFn(ctx, tx, fn) })
	if done {
		return res, err
	}
	commitAt := r.store.Len()
	r.store.Queue(g.q.commit)
	err = g.finished(ctx, c, r, g.readOutcome(tx.SendBatch(ctx, r.store), r.store.Len(), commitAt, c, r.ferr))
	// After a failed COMMIT (or a connection lost under it) the
	// transaction may be over: nothing to roll back then.
	open = err != nil && conn.PgConn().TxStatus() != 'I'
	return txguard.Outcome(r.value, r.ferr, err)
}

// doBegun is Do over any other Beginner: BEGIN is a round trip of its own,
// and so is COMMIT, after the outcome's statement.
func (g *TxGuard) doBegun(ctx context.Context, c *txCall, fn TxFunc) (idem.Result, error) {
	tx, err := g.db.BeginTx(ctx, pgx.TxOptions{BeginQuery: g.begin})
	if err != nil {
		return idem.Result{}, g.x.StoreErr(ctx, c, idem.OpClaim, translate("begin", err))
	}
	done := false
	defer func() {
		if !done { // an error, or fn panicked
			g.rollback(ctx, c, tx)
		}
	}()
	b := &pgx.Batch{}
	claimAt := g.queueClaim(b, c.Args, false)
	r, res, answered, err := g.claimAndRun(ctx, tx, tx.SendBatch(ctx, b), b.Len(), claimAt, c, func() ([]byte, error) { return callFn(ctx, tx, fn) })
	if answered {
		return res, err
	}
	if err := g.readOutcome(tx.SendBatch(ctx, r.store), r.store.Len(), -1, c, r.ferr); err != nil {
		return txguard.Outcome(r.value, r.ferr, g.finished(ctx, c, r, err))
	}
	done = true
	if err := tx.Commit(ctx); err != nil {
		return txguard.Outcome(r.value, r.ferr, g.finished(ctx, c, r, translate("commit", err)))
	}
	return txguard.Outcome(r.value, r.ferr, g.finished(ctx, c, r, nil))
}

// DoTx is Do inside the caller's transaction tx, which the caller commits:
// the claim, fn's writes and the outcome commit with the rest of tx (a
// Kafka offset, an outbox message), or not at all. DoTx works with
// savepoints: when it returns an error other than fn's permanent one, it
// has rolled back its claim and fn's writes and tx is usable; after a
// permanent error, tx holds the Failed record (and not fn's writes), to be
// committed. The outcome's row stays locked until tx ends, so duplicates
// wait for the caller's commit. A duplicate leaves nothing in tx: its
// claim reads the committed outcome, locks and writes nothing, and is
// rolled back to its savepoint.
//
// tx should be READ COMMITTED: under REPEATABLE READ or SERIALIZABLE a
// duplicate that waited for the holder fails with a serialization error
// (wrapping storage.ErrStoreUnavailable) instead of replaying the outcome, and
// the caller must retry its whole transaction.
func (g *TxGuard) DoTx(ctx context.Context, tx pgx.Tx, key string, payload []byte, fn TxFunc) (idem.Result, error) {
	return g.DoTxScoped(ctx, tx, "", key, payload, fn)
}

// DoTxScoped is [TxGuard.DoTx] for key within scope, as
// [TxGuard.DoScoped].
func (g *TxGuard) DoTxScoped(ctx context.Context, tx pgx.Tx, scope, key string, payload []byte, fn TxFunc) (idem.Result, error) {
	if tx == nil {
		return idem.Result{}, errors.New("pgstore: TxGuard.DoTx: tx is nil")
	}
	c, err := g.x.NewCall(scope, key, payload, fn == nil)
	if err != nil {
		return idem.Result{}, err
	}
	return g.x.WaitLease(ctx, c, func() (idem.Result, error) { return g.doTx(ctx, tx, c, fn) })
}

func (g *TxGuard) doTx(ctx context.Context, tx pgx.Tx, c *txCall, fn TxFunc) (idem.Result, error) {
	kept := false
	defer func() {
		if !kept { // an error, or fn panicked
			g.rollbackTo(ctx, c, tx)
		}
	}()
	b := &pgx.Batch{}
	claimAt := g.queueClaim(b, c.Args, true)
	r, res, done, err := g.claimAndRun(ctx, tx, tx.SendBatch(ctx, b), b.Len(), claimAt, c, func() ([]byte, error) { return fn(ctx, tx) })
	if done {
		return res, err
	}
	r.store.Queue(g.q.releaseClaim)
	err = g.finished(ctx, c, r, g.readOutcome(tx.SendBatch(ctx, r.store), r.store.Len(), -1, c, r.ferr))
	kept = err == nil
	return txguard.Outcome(r.value, r.ferr, err)
}

// txCall is one Do or DoTx (see txguard.Call).
type txCall = txguard.Call

// ran is what fn returned once the claim acquired the key, and the batch
// that stores it.
type ran struct {
	value []byte
	ferr  error      // nil or permanent
	op    idem.Op    // OpComplete or OpFail
	store *pgx.Batch // the statements storing fn's outcome
	sent  time.Time  // when the outcome was sent
}

// claimAndRun reads the claim that br carries (see readClaim) and, when it
// acquired the key, runs fn and returns the batch that stores fn's
// outcome. When there is nothing to store (a duplicate, a busy key, an
// error, fn's retryable error), done is set and res, err are the answer.
func (g *TxGuard) claimAndRun(ctx context.Context, tx pgx.Tx, br pgx.BatchResults, n, claimAt int, c *txCall,
	fn func() ([]byte, error)) (r ran, res idem.Result, done bool, err error) {
	sent := time.Now()
	cl, err := g.readClaim(ctx, tx, br, n, claimAt, c)
	res, done, err = g.x.Run(ctx, c, cl, err, sent, fn)
	if done {
		return r, res, true, err
	}
	r.value, r.ferr = res.Value, err
	r.op, r.store, r.sent = idem.OpComplete, &pgx.Batch{}, time.Now()
	if r.ferr != nil {
		r.op = idem.OpFail
	}
	g.queueOutcome(r.store, c.Args, cl.Token, r.value, r.ferr)
	return r, idem.Result{}, false, nil
}

// callFn runs fn with Do's transaction, which fn can neither commit nor
// roll back, and which is closed to fn once it returned.
func callFn(ctx context.Context, tx pgx.Tx, fn TxFunc) ([]byte, error) {
	ftx := &fnTx{Tx: tx}
	defer ftx.closed.Store(true)
	return fn(ctx, ftx)
}

// finished observes the storing of fn's outcome r, which ended with err
// (its commit included, in Do), logs a failure, and returns err.
func (g *TxGuard) finished(ctx context.Context, c *txCall, r ran, err error) error {
	return g.x.Finished(ctx, c, r.op, r.sent, err)
}

// queueClaim queues the claim of a (for the caller's key) in b and returns
// the claim statement's index. After it the transaction holds the savepoint
// pgstore_fn, and in DoTx (nested) pgstore_claim before it.
func (g *TxGuard) queueClaim(b *pgx.Batch, a storage.ClaimArgs, nested bool) (claimAt int) {
	if nested {
		b.Queue(g.q.savepointClaim)
	}
	if nested || b.Len() > 0 { // else the transaction began with g.begin, which sets it
		b.Queue(g.setLockTimeout)
	}
	claimAt = b.Len()
	b.Queue(g.q.txClaimRead, claimParams(a, false)...)
	b.Queue(g.q.savepointFn)
	return claimAt
}

// claimParams are the parameters of tx_claim_read, or of tx_claim (full),
// which takes the cause it stores when capped too.
func claimParams(a storage.ClaimArgs, full bool) []any {
	p := []any{[]byte(a.Key), fingerprint(a), micros(a.Lease), micros(a.Retention), maxAttempts(a.MaxAttempts)}
	if full {
		p = append(p, tooManyAttempts)
	}
	return p
}

// readClaim reads the n results of a batch of queueClaim (the claim at
// claimAt), closing br, and answers as claimLoop.
func (g *TxGuard) readClaim(ctx context.Context, tx pgx.Tx, br pgx.BatchResults, n, claimAt int, c *txCall) (storage.Claim, error) {
	first := true
	return claimLoop(g.q, c, g.cfg.LockTimeout, func(claim string, params []any) (claimRow, bool, error) {
		if first {
			first = false
			return readClaimRow(br, n, claimAt)
		}
		b := &pgx.Batch{}
		b.Queue(claim, params...)
		b.Queue(g.q.savepointFn) // again: after this claim's write
		return readClaimRow(tx.SendBatch(ctx, b), b.Len(), 0)
	})
}

// claimLoop is a TxGuard's claim of c's key, whose statements run does
// (the first one, tx_claim_read, may have been sent already). The claim
// reads first, and writes only a new key's record or a takeover: a
// duplicate leaves neither a write nor a row lock in the transaction.
// When it returns no row (a concurrent claim wrote the row between its
// read and its write), it runs again, and after readFirstTries runs the
// full claim answers from the row it locks. A claim that waited
// lockTimeout for the key's row is idem.ErrInProgress.
func claimLoop(q queries, c *txCall, lockTimeout time.Duration, run func(claim string, params []any) (claimRow, bool, error)) (storage.Claim, error) {
	a := c.Args
	r, found, err := run(q.txClaimRead, claimParams(a, false))
	capped := found && r.status == statusCapped
	for try := 1; err == nil && (!found || capped); try++ {
		// The claim that returned no row, or found the cap, restored no
		// lock_timeout: the guard's is still set. The cap goes to the full
		// claim at once.
		full := try >= readFirstTries || capped
		claim := q.txClaimRead
		if full {
			claim = q.txClaim
		}
		r, found, err = run(claim, claimParams(a, full))
		capped = found && !full && r.status == statusCapped
		if err == nil && !found && full {
			err = errors.New("the full claim returned no row")
		}
	}
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == pgerrcode.LockNotAvailable {
			return storage.Claim{}, fmt.Errorf("%w (key %q): its transaction did not end within %v", idem.ErrInProgress, c.Key, lockTimeout)
		}
		return storage.Claim{}, translate("claim", err)
	}
	cl, err := r.claim(a)
	if errors.Is(err, storage.ErrKeyReused) {
		err = fmt.Errorf("%w (key %q)", err, c.Key)
	}
	return cl, err
}

// readClaimRow reads the n results of br, whose claim is at claimAt, and
// closes br. found reports that the claim returned its row.
func readClaimRow(br pgx.BatchResults, n, claimAt int) (r claimRow, found bool, err error) {
	for i := 0; i < n && err == nil; i++ {
		if i != claimAt {
			_, err = br.Exec()
			continue
		}
		err = br.QueryRow().Scan(&r.status, &r.token, &r.attempt, &r.sameFingerprint, &r.leaseUntil, &r.result, &r.expiresAt, &r.acquired, nil)
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return r, found, err
}

// queueOutcome queues the statements storing fn's outcome: its value, or
// its permanent error ferr after rolling fn's writes back.
func (g *TxGuard) queueOutcome(b *pgx.Batch, a storage.ClaimArgs, t storage.Token, value []byte, ferr error) {
	if ferr == nil {
		b.Queue(g.q.txComplete, []byte(a.Key), int64(t), value, micros(g.x.Cfg.Retention))
		return
	}
	b.Queue(g.q.rollbackFn)
	b.Queue(g.q.txFail, []byte(a.Key), int64(t), storage.EncodeFailure(ferr), micros(g.x.Cfg.FailedRetention))
}

// readOutcome reads the n results of a batch of queueOutcome and whatever
// was queued after it, commitAt being the index of a COMMIT (-1 if none),
// and closes br.
func (g *TxGuard) readOutcome(br pgx.BatchResults, n, commitAt int, c *txCall, ferr error) error {
	key := c.Key
	op := "complete"
	if ferr != nil {
		op = "fail"
	}
	var err error
	for i := 0; i < n && err == nil; i++ {
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		if isNoOutcomeRow(err) {
			err = fmt.Errorf("pgstore: %s (key %q): %w: fn changed the record", op, key, storage.ErrLeaseLost)
			op = ""
		}
		if i == commitAt {
			op = "commit"
			if err == nil && tag.String() == "ROLLBACK" {
				err = pgx.ErrTxCommitRollback
			}
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil || op == "" {
		return err
	}
	if _, ok := errors.AsType[*pgconn.PgError](err); !ok && commitAt >= 0 {
		op = "commit" // the COMMIT was sent: whether it ran is unknown
	}
	return translate(op, err)
}

// isNoOutcomeRow reports whether err is the error of tx_complete or
// tx_fail that matched no row: fn changed the record.
func isNoOutcomeRow(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == pgerrcode.InvalidTextRepresentation && strings.Contains(pgErr.Message, noOutcomeRow)
}

// fnTx is the transaction fn gets from Do: Do's, except that fn cannot
// commit or roll it back (the claim would commit without the outcome, or
// the outcome fail), and that it is closed once fn returned.
type fnTx struct {
	pgx.Tx
	closed atomic.Bool
}

var errFnEndsTx = errors.New("pgstore: fn must not commit or roll back the transaction of TxGuard.Do")

func (t *fnTx) Commit(context.Context) error {
	if t.closed.Load() {
		return pgx.ErrTxClosed
	}
	return errFnEndsTx
}

func (t *fnTx) Rollback(context.Context) error {
	if t.closed.Load() {
		return pgx.ErrTxClosed
	}
	return errFnEndsTx
}

func (t *fnTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	return t.Tx.Begin(ctx)
}

func (t *fnTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.closed.Load() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *fnTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *fnTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.closed.Load() {
		return errRow{pgx.ErrTxClosed}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

func (t *fnTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.closed.Load() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return t.Tx.SendBatch(ctx, b)
}

func (t *fnTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if t.closed.Load() {
		return 0, pgx.ErrTxClosed
	}
	return t.Tx.CopyFrom(ctx, table, columns, src)
}

func (t *fnTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	return t.Tx.Prepare(ctx, name, sql)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// rollback ends Do's transaction, detached from the caller's
// cancellation (with its own timeout, Config.StoreTimeout): a caller that
// gave up must not leave a transaction open.
func (g *TxGuard) rollback(ctx context.Context, c *txCall, tx pgx.Tx) {
	g.cleanup(ctx, c, func(ctx context.Context) error {
		return tx.Rollback(ctx) // on failure pgx closes the connection, which ends the transaction
	})
}

// rollbackTo undoes DoTx's claim and fn's writes, leaving tx usable.
func (g *TxGuard) rollbackTo(ctx context.Context, c *txCall, tx pgx.Tx) {
	g.cleanup(ctx, c, func(ctx context.Context) error {
		_, err := tx.Exec(ctx, g.q.rollbackClaim)
		return err
	})
}

func (g *TxGuard) cleanup(ctx context.Context, c *txCall, undo func(context.Context) error) {
	g.x.Cleanup(ctx, c, undo)
}
