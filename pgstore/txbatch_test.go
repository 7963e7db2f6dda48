package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
)

// batchRun is one DoBatchTx in a transaction of its own, committed after
// it: its results, how many finished, and how often fn ran for each
// operation.
type batchRun struct {
	res  []idem.BatchResult
	done int
	runs map[int]int
}

// doBatch runs ops with e.g's DoBatchTx in a new transaction and commits
// it; fail(i) is fn's error for ops[i] (nil: pay).
func (e *txEnv) doBatch(t *testing.T, ops []idem.BatchOp, fail func(i int) error) batchRun {
	t.Helper()
	ctx := testCtx(t)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var mu sync.Mutex
	r := batchRun{runs: map[int]int{}}
	r.res, r.done, err = e.g.DoBatchTx(ctx, tx, ops, func(ctx context.Context, tx pgx.Tx, i int) ([]byte, error) {
		mu.Lock()
		r.runs[i]++
		mu.Unlock()
		v, err := e.pay(ops[i].Key)(ctx, tx)
		if err == nil && fail != nil {
			err = fail(i)
		}
		return v, err
	})
	if err != nil {
		t.Fatalf("DoBatchTx: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

func batchOps(keys ...string) []idem.BatchOp {
	ops := make([]idem.BatchOp, len(keys))
	for i, k := range keys {
		ops[i] = idem.BatchOp{Key: k, Payload: []byte("pay 10")}
	}
	return ops
}

// Every operation of a batch commits with its record; the same batch again
// replays every value and runs nothing.
func TestDoBatchTxCommitsEachOnceAndReplays(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{})
	ops := batchOps("b1", "b2", "b3")
	r := e.doBatch(t, ops, nil)
	if r.done != 3 {
		t.Fatalf("done %d, want 3: %v", r.done, r.res)
	}
	for i, res := range r.res {
		if res.Err != nil || res.Replayed || len(res.Value) == 0 {
			t.Errorf("op %d: %+v", i, res)
		}
		rec, err := e.record(t, ops[i].Key)
		if err != nil || rec.Status != storage.StatusCompleted || string(rec.Result) != string(res.Value) {
			t.Errorf("op %d: record %+v, %v; want Completed with %q", i, rec, err, res.Value)
		}
	}
	again := e.doBatch(t, ops, nil)
	if again.done != 3 || len(again.runs) != 0 {
		t.Fatalf("the batch again: done %d, fn ran %v; want 3 replays", again.done, again.runs)
	}
	for i, res := range again.res {
		if res.Err != nil || !res.Replayed || string(res.Value) != string(r.res[i].Value) {
			t.Errorf("op %d again: %+v, want the first value replayed", i, res)
		}
		if n := e.ledgerRows(t, ops[i].Key); n != 1 {
			t.Errorf("op %d: %d ledger rows, want 1", i, n)
		}
	}
}

// Two operations with the same key are one; another payload under it is
// ErrKeyReused, and a refused key is ErrInvalidKey: all finish.
func TestDoBatchTxSameKeyAndRefusedKeys(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{})
	ops := batchOps("s1", "s1", "s1", "")
	ops[2].Payload = []byte("pay 20")
	r := e.doBatch(t, ops, nil)
	if r.done != 4 || r.runs[0] != 1 || len(r.runs) != 1 {
		t.Fatalf("done %d, fn ran %v: want 4 done, fn once", r.done, r.runs)
	}
	if r.res[0].Err != nil || r.res[1].Err != nil || !r.res[1].Replayed || string(r.res[1].Value) != string(r.res[0].Value) {
		t.Errorf("same key: %+v, %+v; want the second to replay the first", r.res[0], r.res[1])
	}
	if !errors.Is(r.res[2].Err, storage.ErrKeyReused) {
		t.Errorf("another payload: %v, want ErrKeyReused", r.res[2].Err)
	}
	if !errors.Is(r.res[3].Err, idem.ErrInvalidKey) {
		t.Errorf("empty key: %v, want ErrInvalidKey", r.res[3].Err)
	}
	if n := e.ledgerRows(t, "s1"); n != 1 {
		t.Errorf("%d ledger rows, want 1", n)
	}
}

// fn's error stops the batch there: the operations before it commit, and
// nothing of it or of the operations after it (their claims included) is
// in the transaction; a permanent error is not stored by the batch.
func TestDoBatchTxStopsAtAnError(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{})
	errBoom := errors.New("boom")
	for _, permanent := range []bool{false, true} {
		ops := batchOps(fmt.Sprint("e1-", permanent), fmt.Sprint("e2-", permanent), fmt.Sprint("e3-", permanent), fmt.Sprint("e4-", permanent))
		r := e.doBatch(t, ops, func(i int) error {
			switch {
			case i != 2:
				return nil
			case permanent:
				return idem.Permanent(errBoom)
			}
			return errBoom
		})
		if r.done != 2 || !errors.Is(r.res[2].Err, errBoom) || !errors.Is(r.res[3].Err, idem.ErrNotRun) {
			t.Fatalf("permanent=%v: done %d, results %v; want 2 done, boom, ErrNotRun", permanent, r.done, r.res)
		}
		for i, op := range ops {
			rec, err := e.record(t, op.Key)
			rows := e.ledgerRows(t, op.Key)
			if i < 2 && (err != nil || rec.Status != storage.StatusCompleted || rows != 1) {
				t.Errorf("permanent=%v, op %d: record %+v, %v, %d ledger rows; want Completed, 1 row", permanent, i, rec, err, rows)
			}
			if i >= 2 && (!errors.Is(err, storage.ErrNotFound) || rows != 0) {
				t.Errorf("permanent=%v, op %d: record %+v, %v, %d ledger rows; want none", permanent, i, rec, err, rows)
			}
		}
	}
}

// A key held by a plain Guard's live lease stops the batch there, at once:
// the operations before it commit, the claims after it do not.
func TestDoBatchTxStopsAtABusyKey(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{Config: idem.Config{Wait: time.Minute}})
	ctx := testCtx(t)
	c, err := e.store.Claim(ctx, storage.ClaimArgs{Key: storage.StoreKey("payments", "busy2"), Fingerprint: idem.SHA256Fingerprint(nil, []byte("pay 10")),
		Lease: time.Hour, Retention: time.Hour})
	if err != nil || c.Outcome != storage.Acquired {
		t.Fatal(c.Outcome, err)
	}
	ops := batchOps("busy1", "busy2", "busy3")
	start := time.Now()
	r := e.doBatch(t, ops, nil)
	if r.done != 1 || !errors.Is(r.res[1].Err, idem.ErrInProgress) || !errors.Is(r.res[2].Err, idem.ErrNotRun) {
		t.Fatalf("done %d, results %v; want 1 done, ErrInProgress, ErrNotRun", r.done, r.res)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the batch took %v: it waited for the lease", took)
	}
	if rec, err := e.record(t, "busy1"); err != nil || rec.Status != storage.StatusCompleted {
		t.Errorf("busy1: %+v, %v; want Completed", rec, err)
	}
	if _, err := e.record(t, "busy3"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("busy3, after the busy key: %v, want no record", err)
	}
	if n := e.ledgerRows(t, "busy3"); n != 0 {
		t.Errorf("busy3: %d ledger rows", n)
	}
}

// A key held by another transaction past the lock timeout fails the batch
// with ErrInProgress, leaves nothing of it in the caller's transaction,
// and the transaction usable.
func TestDoBatchTxKeyHeldByATransaction(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{TxConfig: pgstore.TxConfig{LockTimeout: 50 * time.Millisecond}})
	ctx := testCtx(t)
	holder, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := e.g.DoTx(ctx, holder, "held", []byte("pay 10"), e.pay("held")); err != nil {
		t.Fatal(err)
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ran := 0
	_, done, err := e.g.DoBatchTx(ctx, tx, batchOps("free", "held"), func(ctx context.Context, tx pgx.Tx, i int) ([]byte, error) {
		ran++
		return nil, nil
	})
	if !errors.Is(err, idem.ErrInProgress) || done != 0 || ran != 0 {
		t.Fatalf("DoBatchTx over a held key: %v, done %d, fn ran %d; want ErrInProgress, nothing", err, done, ran)
	}
	var one int
	if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the transaction after the failed batch: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.record(t, "free"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("free: %v, want no record", err)
	}
}
