package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// TxBatchFunc is the operation ops[i] of [TxGuard.DoBatchTx]: it makes its
// writes with tx, the caller's transaction, and returns the value to
// store. It must not commit or roll back tx.
type TxBatchFunc func(ctx context.Context, tx pgx.Tx, i int) ([]byte, error)

// DoBatchTx runs the operations ops in order inside the caller's
// transaction tx, each as [TxGuard.DoTxScoped] would run it with fn(ctx,
// tx, i) as its operation, in a few round trips for the whole batch: every
// key is claimed in one statement before the first fn runs, and the values
// are stored in one statement after the last one returned. It is for
// consumers that receive messages in batches and commit them with more
// writes (a Kafka offset): the claims, fn's writes and the outcomes commit
// with tx, or not at all.
//
// It returns one result per operation, and done: ops[:done] finished and
// are in tx, to be committed with it. An operation finishes with a value,
// fresh or replayed (Result.Replayed), or with an answer that leaves
// nothing in tx: a stored permanent error replayed, storage.ErrKeyReused,
// idem.ErrInvalidKey. Two operations with the same scope and key are one:
// the second gets the first's outcome, replayed (or storage.ErrKeyReused for
// another payload).
//
// DoBatchTx stops at the first operation that does not finish, so that
// the operations after it do not overtake it; res[done] says why, and
// every later result is idem.ErrNotRun:
//
//   - fn returned an error, permanent or not. Its writes cannot be undone
//     alone without a savepoint per operation, so it is not stored: run
//     that operation with DoTxScoped, which stores a permanent error.
//   - The key is held by a plain Guard's live lease (idem.ErrInProgress).
//     The batch does not wait for it, whatever Config.Wait says: tx holds
//     the keys before it until the caller commits.
//
// Nothing of the operations from done on is left in tx: when fn's writes
// or a claim past the stop are in it, DoBatchTx rolls back to a savepoint
// taken before its claims and runs ops[:done] again, fn included (fn may
// run more than once; its writes commit once).
//
// err reports a failure of the database (wrapping storage.ErrStoreUnavailable,
// or a SQL error), or a key held by another transaction for longer than
// TxConfig.LockTimeout (wrapping idem.ErrInProgress; which key is not
// known: DoTxScoped finds out). Then done is 0 and nothing of the batch is
// in tx; when the rollback to the savepoint failed too, tx is unusable.
//
// tx should be READ COMMITTED, as for DoTx. Each stop costs a rollback to
// the savepoint and a run of the operations before it: a batch is fastest
// when its operations succeed.
func (g *TxGuard) DoBatchTx(ctx context.Context, tx pgx.Tx, ops []idem.BatchOp, fn TxBatchFunc) (res []idem.BatchResult, done int, err error) {
	switch {
	case tx == nil:
		return nil, 0, errors.New("pgstore: TxGuard.DoBatchTx: tx is nil")
	case fn == nil:
		return nil, 0, errors.New("pgstore: TxGuard.DoBatchTx: fn is nil")
	}
	b := &txBatch{g: g, ctx: ctx, tx: tx, ops: ops, fn: fn,
		res:     make([]idem.BatchResult, len(ops)),
		calls:   make([]*txCall, len(ops)),
		lead:    make([]int, len(ops)),
		claimOf: make([]int, len(ops)),
	}
	first := make(map[string]int, len(ops))
	for i, op := range ops {
		b.lead[i], b.claimOf[i] = -1, -1
		c, err := g.x.NewCall(op.Scope, op.Key, op.Payload, false)
		if err != nil {
			b.res[i].Err = err // finished: nothing to claim
			continue
		}
		b.calls[i] = c
		if j, ok := first[c.Args.Key]; ok {
			b.lead[i] = j
			continue
		}
		first[c.Args.Key] = i
		b.lead[i], b.claimOf[i] = i, len(b.args)
		b.args = append(b.args, c.Args)
	}
	done, err = b.run(len(ops))
	if err != nil {
		for i := range b.res {
			b.res[i] = idem.BatchResult{Err: idem.ErrNotRun}
		}
		if len(b.res) > 0 {
			b.res[0].Err = err
		}
		return b.res, 0, err
	}
	return b.res, done, nil
}

// txBatch is one DoBatchTx.
type txBatch struct {
	g   *TxGuard
	ctx context.Context
	tx  pgx.Tx
	ops []idem.BatchOp
	fn  TxBatchFunc
	res []idem.BatchResult

	calls   []*txCall           // nil for an operation whose key was refused
	lead    []int               // the first operation of the same store key (itself for the first), or -1
	claimOf []int               // the index in args of the operation's claim, or -1
	args    []storage.ClaimArgs // one per distinct store key, in the order of the operations
}

// batchRan is an operation fn ran and returned a value for, to store.
type batchRan struct {
	i     int
	token storage.Token
	value []byte
}

// run runs ops[:n] (n > 0) in one round: claims, fns, outcomes. It returns
// how many finished; past them nothing is in tx.
func (b *txBatch) run(n int) (int, error) {
	if n == 0 {
		return 0, nil
	}
	m := b.claimsOf(n)
	if m == 0 { // every key refused: nothing to claim
		return n, nil
	}
	claims, sent, err := b.claim(b.args[:m])
	if err != nil {
		return 0, err
	}
	stop, ranAt, ran := b.runClaimed(n, claims, time.Since(sent))
	for i := stop + 1; i < len(b.res); i++ {
		b.res[i] = idem.BatchResult{Err: idem.ErrNotRun}
	}
	if ranAt >= 0 || acquiredPast(claims, b.claimOf[stop:n]) {
		return b.runAgain(stop)
	}
	if err := b.complete(ran); err != nil {
		return 0, err
	}
	return stop, nil
}

// claimsOf returns m: the claims of ops[:n] are args[:m], a lead's claim
// coming in its order.
func (b *txBatch) claimsOf(n int) int {
	m := 0
	for _, k := range b.claimOf[:n] {
		if k >= 0 {
			m = k + 1
		}
	}
	return m
}

// runClaimed goes through ops[:n] in order with their claims, answered
// took after they were sent: it runs fn for each whose claim acquired its
// key and sets the result of each that finishes, up to the first that
// does not, stop (n when all did). ranAt is stop when fn ran for it (its
// writes are in tx), else -1; ran are the values to store.
func (b *txBatch) runClaimed(n int, claims []storage.Claim, took time.Duration) (stop, ranAt int, ran []batchRan) {
	stop, ranAt = n, -1
	for i := range n {
		c := b.calls[i]
		switch {
		case c == nil: // a refused key: its result is set
			continue
		case b.lead[i] != i: // the key of an earlier operation
			b.res[i] = b.follow(i)
			continue
		}
		cl := claims[b.claimOf[i]]
		res, finished, err := b.g.x.Run(b.ctx, c, cl, cl.Err, time.Now().Add(-took), func() ([]byte, error) {
			return b.fn(b.ctx, b.tx, i)
		})
		switch {
		case finished && err == nil, finished && cl.Err != nil, finished && cl.Outcome == storage.Duplicate:
			// A value replayed, or an answer from the claim.
			if errors.Is(err, storage.ErrKeyReused) {
				err = fmt.Errorf("%w (key %q)", err, c.Key)
			}
			b.res[i] = idem.BatchResult{Result: res, Err: err}
			continue
		case finished && cl.Outcome == storage.Busy:
			stop = i
		case finished: // fn's retryable error
			stop, ranAt = i, i
		case err != nil: // fn's permanent error: not stored here
			stop, ranAt = i, i
		default:
			b.res[i] = idem.BatchResult{Result: res}
			ran = append(ran, batchRan{i: i, token: cl.Token, value: res.Value})
			continue
		}
		b.res[i] = idem.BatchResult{Err: err}
		break
	}
	return stop, ranAt, ran
}

// runAgain undoes the round, in which fn's writes, or a claim, of an
// operation that did not finish, ops[stop], are in tx, and runs the
// operations before it again. When they all finish again, ops[stop]'s
// result stays the one this round found.
func (b *txBatch) runAgain(stop int) (int, error) {
	b.g.x.Cleanup(b.ctx, b.callAt(stop), func(ctx context.Context) error {
		_, err := b.tx.Exec(ctx, b.g.q.rollbackBatch)
		return err
	})
	stopRes := b.res[stop]
	done, err := b.run(stop)
	if err != nil {
		return 0, err
	}
	if done == stop {
		b.res[stop] = stopRes
	}
	return done, nil
}

// callAt returns the call of ops[i], or of the first operation with a call
// (for the observer of a rollback).
func (b *txBatch) callAt(i int) *txCall {
	if i < len(b.calls) && b.calls[i] != nil {
		return b.calls[i]
	}
	for _, c := range b.calls {
		if c != nil {
			return c
		}
	}
	return &txCall{}
}

// follow is the result of ops[i], whose key ops[lead[i]] has, finished
// before it: the lead's outcome, replayed, or storage.ErrKeyReused for
// another payload.
func (b *txBatch) follow(i int) idem.BatchResult {
	c, lc := b.calls[i], b.calls[b.lead[i]]
	if !bytes.Equal(c.Args.Fingerprint, lc.Args.Fingerprint) {
		return idem.BatchResult{Err: fmt.Errorf("%w (key %q)", storage.ErrKeyReused, c.Key)}
	}
	r := b.res[b.lead[i]]
	r.Replayed = true
	return r
}

// acquiredPast reports whether any claim of claimOf (indexes into claims,
// or -1) acquired its key.
func acquiredPast(claims []storage.Claim, claimOf []int) bool {
	for _, k := range claimOf {
		if k >= 0 && claims[k].Err == nil && claims[k].Outcome == storage.Acquired {
			return true
		}
	}
	return false
}

// claim takes the savepoint pgstore_batch and claims args (distinct keys)
// with the guard's lock timeout, in one round trip. On an error it has
// rolled back to the savepoint.
func (b *txBatch) claim(args []storage.ClaimArgs) ([]storage.Claim, time.Time, error) {
	g := b.g
	sent := time.Now()
	claims := make([]storage.Claim, len(args))
	batch := &pgx.Batch{}
	batch.Queue(g.q.savepointBatch)
	batch.Queue(g.setLockTimeout)
	r := newClaimRound(args, claimRounds(args)[0], math.MaxInt32) // distinct keys: one round
	batch.Queue(g.q.claimBatch, r.params...)
	batch.Queue(g.q.restoreLockTimeout)
	br := b.tx.SendBatch(b.ctx, batch)
	var err error
	for i := range batch.Len() {
		if err != nil {
			break
		}
		if i != 2 {
			_, err = br.Exec()
			continue
		}
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = r.scan(rows, args, claims)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == pgerrcode.LockNotAvailable {
		b.rollback()
		return nil, sent, fmt.Errorf("pgstore: claim batch: %w: a key of the batch stayed held by another transaction for %v", idem.ErrInProgress, g.cfg.LockTimeout)
	}
	return claims, sent, b.failed("claim batch", err)
}

// complete stores the values of ran and releases the savepoint, in one
// round trip. On an error it has rolled back to the savepoint.
func (b *txBatch) complete(ran []batchRan) error {
	g := b.g
	sent := time.Now()
	batch := &pgx.Batch{}
	if len(ran) > 0 {
		keys := make([][]byte, len(ran))
		tokens := make([]int64, len(ran))
		values := make([][]byte, len(ran))
		retentions := make([]time.Duration, len(ran))
		for n, r := range ran {
			keys[n], tokens[n], values[n] = []byte(b.calls[r.i].Args.Key), int64(r.token), r.value
			retentions[n] = micros(g.x.Cfg.Retention)
		}
		batch.Queue(g.q.completeBatch, keys, tokens, values, retentions)
	}
	batch.Queue(g.q.releaseBatch)
	br := b.tx.SendBatch(b.ctx, batch)
	var err error
	if len(ran) > 0 {
		stored := 0
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			for rows.Next() {
				stored++
			}
			rows.Close()
			err = rows.Err()
		}
		if err == nil && stored != len(ran) {
			err = fmt.Errorf("%w: %d of %d outcomes matched no record in progress (fn changed the record)", storage.ErrLeaseLost, len(ran)-stored, len(ran))
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	err = b.failed("complete batch", err)
	for _, r := range ran {
		b.g.x.Finished(b.ctx, b.calls[r.i], idem.OpComplete, sent, err)
	}
	return err
}

// failed returns nil for a nil err; otherwise it rolls back to the
// savepoint and returns err translated.
func (b *txBatch) failed(op string, err error) error {
	if err == nil {
		return nil
	}
	b.rollback()
	if errors.Is(err, storage.ErrLeaseLost) {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	return translate(op, err)
}

// rollback undoes the round, detached from the caller's cancellation.
func (b *txBatch) rollback() {
	b.g.x.Cleanup(b.ctx, b.callAt(0), func(ctx context.Context) error {
		_, err := b.tx.Exec(ctx, b.g.q.rollbackBatch)
		return err
	})
}
