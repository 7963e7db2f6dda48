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
// The claim sets expires_at to its time + txLease + Retention, and the
// complete to the later of that and its own time + Retention: for an fn
// shorter than txLease the complete leaves expires_at as it is, which
// makes it a HOT update (no new index entries). A completed record is so
// kept at least Retention after its commit, at most txLease more.
const txLease = time.Second

// TxGuard runs operations whose effects are writes to the same PostgreSQL
// database exactly once per key: the claim of the key, the operation's
// writes and its outcome commit in one transaction, or none of them does.
// Create one with [NewTxGuard]; it is safe for concurrent use and owns no
// goroutine.
type TxGuard struct {
	db  Beginner
	cfg TxConfig
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
		db:  db,
		cfg: cfg,
		q:   newQueries(t),
		// The subquery (kept by OFFSET 0 and its volatile function) runs
		// first: the saved value is the transaction's. An integer literal:
		// nothing of the caller's enters the text.
		setLockTimeout: fmt.Sprintf(`SELECT set_config('lock_timeout', '%d', true)
			FROM (SELECT set_config('pgstore.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) saved`,
			cfg.LockTimeout.Milliseconds()),
	}
	g.begin = "BEGIN ISOLATION LEVEL READ COMMITTED; " + g.setLockTimeout
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
// fn must not commit or roll back tx (both return an error), and tx is
// closed once fn returned. Over a *pgxpool.Pool or a *pgx.Conn, Do costs
// three round trips besides fn's: BEGIN pipelined with the claim, and the
// outcome with COMMIT (a key that has a record costs one more, for the
// full claim). A completed record is kept at least Retention after its
// commit (see txLease).
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
	switch db := g.db.(type) {
	case *pgxpool.Pool:
		c, err := db.Acquire(ctx)
		if err != nil {
			return idem.Result{}, translate("begin", err)
		}
		defer c.Release() // a connection left in a transaction is closed, not reused
		return g.doPipelined(ctx, c.Conn(), key, payload, fn)
	case *pgx.Conn:
		return g.doPipelined(ctx, db, key, payload, fn)
	}
	return g.doBegun(ctx, key, payload, fn)
}

// doPipelined is Do on a connection of its own, in three round trips
// besides fn's: BEGIN is pipelined with the claim (pgx's Batch.BeginTx),
// and the outcome with COMMIT. The outcome statement raises an error when
// it matches no row, so the COMMIT behind it never commits fn's writes
// without their outcome: the server skips the rest of a pipeline after an
// error, and the transaction rolls back.
func (g *TxGuard) doPipelined(ctx context.Context, conn *pgx.Conn, key string, payload []byte, fn TxFunc) (idem.Result, error) {
	a := g.claimArgs(key, payload)
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	claimAt := g.queueClaim(b, a, false)
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	open := true // tx is to be rolled back when Do returns
	defer func() {
		if open { // an error, or fn panicked
			rollback(ctx, tx)
		}
	}()
	r, res, err, done := g.claimAndRun(ctx, tx, br, b.Len(), claimAt, key, a, func() ([]byte, error) { return callFn(ctx, tx, fn) })
	if done {
		return res, err
	}
	commitAt := r.store.Len()
	r.store.Queue("COMMIT")
	err = g.readOutcome(tx.SendBatch(ctx, r.store), r.store.Len(), commitAt, key, r.ferr)
	// After a failed COMMIT (or a connection lost under it) the
	// transaction may be over: nothing to roll back then.
	open = err != nil && conn.PgConn().TxStatus() != 'I'
	return outcome(r.value, r.ferr, err)
}

// doBegun is Do over any other Beginner: BEGIN is a round trip of its own,
// and so is COMMIT, after the outcome's statement.
func (g *TxGuard) doBegun(ctx context.Context, key string, payload []byte, fn TxFunc) (idem.Result, error) {
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
	a := g.claimArgs(key, payload)
	b := &pgx.Batch{}
	claimAt := g.queueClaim(b, a, false)
	r, res, err, answered := g.claimAndRun(ctx, tx, tx.SendBatch(ctx, b), b.Len(), claimAt, key, a, func() ([]byte, error) { return callFn(ctx, tx, fn) })
	if answered {
		return res, err
	}
	if err := g.readOutcome(tx.SendBatch(ctx, r.store), r.store.Len(), -1, key, r.ferr); err != nil {
		return outcome(r.value, r.ferr, err)
	}
	done = true
	if err := tx.Commit(ctx); err != nil {
		return outcome(r.value, r.ferr, translate("commit", err))
	}
	return outcome(r.value, r.ferr, nil)
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
	kept := false
	defer func() {
		if !kept { // an error, or fn panicked
			rollbackTo(ctx, tx)
		}
	}()
	a := g.claimArgs(key, payload)
	b := &pgx.Batch{}
	claimAt := g.queueClaim(b, a, true)
	r, res, err, done := g.claimAndRun(ctx, tx, tx.SendBatch(ctx, b), b.Len(), claimAt, key, a, func() ([]byte, error) { return fn(ctx, tx) })
	if done {
		return res, err
	}
	r.store.Queue("RELEASE SAVEPOINT pgstore_claim")
	err = g.readOutcome(tx.SendBatch(ctx, r.store), r.store.Len(), -1, key, r.ferr)
	kept = err == nil
	return outcome(r.value, r.ferr, err)
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

func (g *TxGuard) claimArgs(key string, payload []byte) idem.ClaimArgs {
	return idem.ClaimArgs{
		Key:         idem.StoreKey(g.cfg.Namespace, key),
		Fingerprint: g.cfg.Fingerprint(nil, payload),
		Lease:       txLease,
		Retention:   g.cfg.Retention,
	}
}

// ran is what fn returned once the claim acquired the key, and the batch
// that stores it.
type ran struct {
	value []byte
	ferr  error      // nil or permanent
	store *pgx.Batch // the statements storing fn's outcome
}

// claimAndRun reads the claim that br carries (see readClaim) and, when it
// acquired the key, runs fn and returns the batch that stores fn's
// outcome. When there is nothing to store (a duplicate, a busy key, an
// error, fn's retryable error), done is set and res, err are the answer.
func (g *TxGuard) claimAndRun(ctx context.Context, tx pgx.Tx, br pgx.BatchResults, n, claimAt int, key string, a idem.ClaimArgs,
	fn func() ([]byte, error)) (r ran, res idem.Result, err error, done bool) {
	cl, err := g.readClaim(ctx, tx, br, n, claimAt, key, a)
	if err != nil {
		return r, idem.Result{}, err, true
	}
	if res, err, done := g.claimed(cl, key); done {
		return r, res, err, true
	}
	r.value, r.ferr = fn()
	if r.ferr != nil && !idem.IsPermanent(r.ferr) {
		return r, idem.Result{}, r.ferr, true
	}
	r.store = &pgx.Batch{}
	g.queueOutcome(r.store, a, cl.Token, r.value, r.ferr)
	return r, idem.Result{}, nil, false
}

// claimed answers a claim that did not acquire the key: done is false
// when it did, and fn is to run.
func (g *TxGuard) claimed(cl idem.Claim, key string) (res idem.Result, err error, done bool) {
	switch cl.Outcome {
	case idem.Duplicate:
		if cl.Record.Status == idem.StatusFailed {
			return idem.Result{Replayed: true}, idem.DecodeFailure(cl.Record.Result), true
		}
		return idem.Result{Value: cl.Record.Result, Replayed: true}, nil, true
	case idem.Busy:
		return idem.Result{}, fmt.Errorf("%w (key %q, attempt %d): held by a lease", idem.ErrInProgress, key, cl.Record.Attempt), true
	}
	return idem.Result{}, nil, false
}

// callFn runs fn with Do's transaction, which fn can neither commit nor
// roll back, and which is closed to fn once it returned.
func callFn(ctx context.Context, tx pgx.Tx, fn TxFunc) ([]byte, error) {
	ftx := &fnTx{Tx: tx}
	defer ftx.closed.Store(true)
	return fn(ctx, ftx)
}

// outcome is Do's answer once fn ran and returned value and ferr (nil or
// permanent), and storing the outcome returned err.
func outcome(value []byte, ferr, err error) (idem.Result, error) {
	switch {
	case err != nil:
		return idem.Result{}, errors.Join(ferr, err)
	case ferr != nil:
		return idem.Result{}, ferr
	}
	return idem.Result{Value: value}, nil
}

// queueClaim queues the claim of a (for the caller's key) in b and returns
// the claim statement's index. After it the transaction holds the savepoint
// pgstore_fn, and in DoTx (nested) pgstore_claim before it.
func (g *TxGuard) queueClaim(b *pgx.Batch, a idem.ClaimArgs, nested bool) (claimAt int) {
	if nested {
		b.Queue("SAVEPOINT pgstore_claim")
	}
	if nested || b.Len() > 0 { // else the transaction began with g.begin, which sets it
		b.Queue(g.setLockTimeout)
	}
	claimAt = b.Len()
	b.Queue(g.q.txClaimNew, []byte(a.Key), fingerprint(a), micros(a.Lease), micros(a.Retention))
	b.Queue("SAVEPOINT pgstore_fn")
	return claimAt
}

// readClaim reads the n results of a batch of queueClaim (the claim at
// claimAt being claimNew), closing br, and when the key has a record
// claims it with the full claim, in a second round trip.
func (g *TxGuard) readClaim(ctx context.Context, tx pgx.Tx, br pgx.BatchResults, n, claimAt int, key string, a idem.ClaimArgs) (idem.Claim, error) {
	r, found, err := readClaimRow(br, n, claimAt, true)
	if err == nil && found {
		// claimNew restored no lock_timeout: it returned no row, and the
		// guard's is still set.
		b := &pgx.Batch{}
		b.Queue(g.q.txClaim, []byte(a.Key), fingerprint(a), micros(a.Lease), micros(a.Retention), int32(0), tooManyAttempts)
		b.Queue("SAVEPOINT pgstore_fn") // again: after this claim's write
		claimAt = 0
		r, _, err = readClaimRow(tx.SendBatch(ctx, b), b.Len(), claimAt, false)
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

// readClaimRow reads the n results of br, whose claim at claimAt is
// claimNew if isNew, and closes br. found reports that claimNew found a
// record and inserted nothing.
func readClaimRow(br pgx.BatchResults, n, claimAt int, isNew bool) (r claimRow, found bool, err error) {
	for i := 0; i < n && err == nil; i++ {
		switch {
		case i != claimAt:
			_, err = br.Exec()
		case isNew:
			err = br.QueryRow().Scan(&r.token, &r.leaseUntil, &r.expiresAt, nil)
			if errors.Is(err, pgx.ErrNoRows) {
				found, err = true, nil
			} else if err == nil {
				r.inserted()
			}
		default:
			err = br.QueryRow().Scan(&r.status, &r.token, &r.attempt, &r.sameFingerprint, &r.leaseUntil, &r.result, &r.expiresAt, &r.acquired, nil)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return r, found, err
}

// queueOutcome queues the statements storing fn's outcome: its value, or
// its permanent error ferr after rolling fn's writes back.
func (g *TxGuard) queueOutcome(b *pgx.Batch, a idem.ClaimArgs, t idem.Token, value []byte, ferr error) {
	if ferr == nil {
		b.Queue(g.q.txComplete, []byte(a.Key), int64(t), value, micros(g.cfg.Retention))
		return
	}
	b.Queue("ROLLBACK TO SAVEPOINT pgstore_fn")
	b.Queue(g.q.txFail, []byte(a.Key), int64(t), idem.EncodeFailure(ferr), micros(g.cfg.FailedRetention))
}

// readOutcome reads the n results of a batch of queueOutcome and whatever
// was queued after it, commitAt being the index of a COMMIT (-1 if none),
// and closes br.
func (g *TxGuard) readOutcome(br pgx.BatchResults, n, commitAt int, key string, ferr error) error {
	op := "complete"
	if ferr != nil {
		op = "fail"
	}
	var err error
	for i := 0; i < n && err == nil; i++ {
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, noOutcomeRow) {
			err = fmt.Errorf("pgstore: %s (key %q): %w: fn changed the record", op, key, idem.ErrLeaseLost)
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

// noOutcomeRow starts the error of the outcome statement that matched no
// row (see queries.txFinish).
const noOutcomeRow = "pgstore: the outcome matched no record"

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
