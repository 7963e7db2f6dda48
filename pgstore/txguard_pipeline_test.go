package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
	"github.com/jackc/pgx/v5"
)

// beginner hides everything of a pool but BeginTx: Do takes its general
// path (BEGIN and COMMIT round trips of their own).
type beginner struct{ db pgstore.Beginner }

func (b beginner) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return b.db.BeginTx(ctx, opts)
}

// txGuards returns TxGuards over e's table and namespace on every kind of
// Beginner: a pool and a connection (the pipelined path), and another one.
func txGuards(t *testing.T, e *txEnv, cfg txConf) map[string]*pgstore.TxGuard {
	t.Helper()
	cfg.Table, cfg.Namespace = e.table, "payments"
	c, err := e.pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	gs := map[string]*pgstore.TxGuard{}
	for name, db := range map[string]pgstore.Beginner{"pool": e.pool, "conn": c.Conn(), "beginner": beginner{e.pool}} {
		g, err := pgstore.NewTxGuard(db, cfg.Config, cfg.TxConfig)
		if err != nil {
			t.Fatal(err)
		}
		gs[name] = g
	}
	return gs
}

// An outcome that matches no row (fn deleted its own claim) must not let
// the COMMIT behind it commit fn's writes: nothing commits, the error says
// so, and a retry runs fn.
func TestTxGuardOutcomeMatchingNoRowCommitsNothing(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{})
	ctx := testCtx(t)
	for name, g := range txGuards(t, e, txConf{}) {
		key := "vanish-" + name
		sneaky := func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			if _, err := e.pay(key)(ctx, tx); err != nil {
				return nil, err
			}
			_, err := tx.Exec(ctx, "DELETE FROM "+e.store.Table()+" WHERE key = $1", []byte(storage.StoreKey("payments", key)))
			return []byte("paid"), err
		}
		_, err := g.Do(ctx, key, nil, sneaky)
		if !errors.Is(err, storage.ErrLeaseLost) {
			t.Fatalf("%s: Do with fn deleting its record: %v, want ErrLeaseLost", name, err)
		}
		if n := e.ledgerRows(t, key); n != 0 {
			t.Fatalf("%s: %d ledger rows committed without their outcome", name, n)
		}
		if _, err := e.record(t, key); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("%s: record after the failed Do: %v, want ErrNotFound", name, err)
		}
		// The connection is usable and the key free: a retry runs fn.
		if res, err := g.Do(ctx, key, nil, e.pay(key)); err != nil || res.Replayed {
			t.Fatalf("%s: retry: %v replayed=%v", name, err, res.Replayed)
		}
		if n := e.ledgerRows(t, key); n != 1 {
			t.Fatalf("%s: %d ledger rows after the retry, want 1", name, n)
		}
	}

	// DoTx: the caller's transaction is rolled back to before the claim.
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, err = e.g.DoTx(ctx, tx, "vanish-dotx", nil, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		e.pay("vanish-dotx")(ctx, tx)
		_, err := tx.Exec(ctx, "UPDATE "+e.store.Table()+" SET token = token + 1000000 WHERE key = $1",
			[]byte(storage.StoreKey("payments", "vanish-dotx")))
		return nil, err
	})
	if !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("DoTx with fn changing its record: %v, want ErrLeaseLost", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.ledgerRows(t, "vanish-dotx"); n != 0 {
		t.Fatalf("DoTx: %d ledger rows committed without their outcome", n)
	}
}

// fn gets a transaction it can neither commit nor roll back, and which is
// closed once fn returned.
func TestTxGuardFnCannotEndTheTransaction(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{})
	ctx := testCtx(t)
	for name, g := range txGuards(t, e, txConf{}) {
		key := "end-" + name
		var kept pgx.Tx
		res, err := g.Do(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			kept = tx
			if _, err := e.pay(key)(ctx, tx); err != nil {
				return nil, err
			}
			if err := tx.Commit(ctx); err == nil {
				return nil, errors.New("fn could commit")
			}
			if err := tx.Rollback(ctx); err == nil {
				return nil, errors.New("fn could roll back")
			}
			// Nested transactions (savepoints) work as usual.
			nested, err := tx.Begin(ctx)
			if err != nil {
				return nil, err
			}
			if _, err := e.pay(key)(ctx, nested); err != nil {
				return nil, err
			}
			if err := nested.Rollback(ctx); err != nil {
				return nil, err
			}
			b := &pgx.Batch{}
			b.Queue("SELECT 1")
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return nil, err
			}
			return []byte("ok"), nil
		})
		if err != nil || string(res.Value) != "ok" {
			t.Fatalf("%s: Do: %q %v", name, res.Value, err)
		}
		if n := e.ledgerRows(t, key); n != 1 {
			t.Fatalf("%s: %d ledger rows, want 1", name, n)
		}
		if _, err := kept.Exec(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: Exec after Do: %v, want ErrTxClosed", name, err)
		}
		if _, err := kept.Query(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: Query after Do: %v, want ErrTxClosed", name, err)
		}
		if err := kept.QueryRow(ctx, "SELECT 1").Scan(new(int)); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: QueryRow after Do: %v, want ErrTxClosed", name, err)
		}
		b := &pgx.Batch{}
		b.Queue("SELECT 1")
		if err := kept.SendBatch(ctx, b).Close(); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: SendBatch after Do: %v, want ErrTxClosed", name, err)
		}
		if _, err := kept.CopyFrom(ctx, pgx.Identifier{"x"}, []string{"a"}, pgx.CopyFromRows(nil)); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: CopyFrom after Do: %v, want ErrTxClosed", name, err)
		}
		if _, err := kept.Prepare(ctx, "p", "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: Prepare after Do: %v, want ErrTxClosed", name, err)
		}
		if _, err := kept.Begin(ctx); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: Begin after Do: %v, want ErrTxClosed", name, err)
		}
		if err := kept.Commit(ctx); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: Commit after Do: %v, want ErrTxClosed", name, err)
		}
		if err := kept.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: Rollback after Do: %v, want ErrTxClosed", name, err)
		}
	}
}

// A key that has a record (here one a plain Guard released) is claimed by
// the full claim, in a second round trip: the takeover commits with fn's
// writes, fn runs with the session's lock_timeout, and a permanent error
// still rolls fn's writes back to after the claim.
func TestTxGuardClaimOfAKeyWithARecord(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{TxConfig: pgstore.TxConfig{LockTimeout: 50 * time.Millisecond}})
	ctx := testCtx(t)
	for name, g := range txGuards(t, e, txConf{TxConfig: pgstore.TxConfig{LockTimeout: 50 * time.Millisecond}}) {
		for i, permanent := range []bool{false, true} {
			key := fmt.Sprintf("taken-%s-%d", name, i)
			c, err := e.store.Claim(ctx, storage.ClaimArgs{Key: storage.StoreKey("payments", key), Fingerprint: idem.SHA256Fingerprint(nil, nil), Lease: time.Minute, Retention: time.Hour})
			if err != nil || c.Outcome != storage.Acquired {
				t.Fatalf("plain claim: %v %v", c.Outcome, err)
			}
			if err := e.store.Release(ctx, storage.StoreKey("payments", key), c.Token); err != nil {
				t.Fatal(err)
			}
			res, err := g.Do(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				if _, err := e.pay(key)(ctx, tx); err != nil {
					return nil, err
				}
				var lt string
				if err := tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&lt); err != nil {
					return nil, err
				}
				if lt == "50ms" {
					return nil, errors.New("fn runs with the claim's lock_timeout")
				}
				if permanent {
					return nil, idem.Permanent(errors.New("declined"))
				}
				return []byte("paid"), nil
			})
			rec, rerr := e.record(t, key)
			if rerr != nil {
				t.Fatalf("%s: record: %v", name, rerr)
			}
			switch {
			case !permanent && (err != nil || string(res.Value) != "paid"):
				t.Fatalf("%s: Do: %q %v", name, res.Value, err)
			case !permanent && (rec.Status != storage.StatusCompleted || rec.Attempt != 2 || e.ledgerRows(t, key) != 1):
				t.Fatalf("%s: record %v attempt %d, %d ledger rows", name, rec.Status, rec.Attempt, e.ledgerRows(t, key))
			case permanent && !idem.IsPermanent(err):
				t.Fatalf("%s: Do: %v, want the permanent error", name, err)
			case permanent && (rec.Status != storage.StatusFailed || e.ledgerRows(t, key) != 0):
				t.Fatalf("%s: record %v, %d ledger rows, want Failed and none", name, rec.Status, e.ledgerRows(t, key))
			}
		}
	}
}

// A completed record is kept at least Retention after its commit, and at
// most the claim's lease (here a second) more than that after its claim.
func TestTxGuardRetentionOfTheOutcome(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{})
	ctx := testCtx(t)
	for name, g := range txGuards(t, e, txConf{Config: idem.Config{Retention: time.Hour, FailedRetention: time.Minute}}) {
		pgstore.SetClaimLease(g, time.Second)
		var now time.Time
		for _, fail := range []bool{false, true} {
			key := fmt.Sprintf("kept-%s-%v", name, fail)
			for _, delay := range []time.Duration{0, 1200 * time.Millisecond} {
				key := fmt.Sprint(key, delay)
				if err := e.pool.QueryRow(ctx, "SELECT statement_timestamp()").Scan(&now); err != nil {
					t.Fatal(err)
				}
				var commit time.Time
				_, err := g.Do(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
					time.Sleep(delay)
					if err := tx.QueryRow(ctx, "SELECT statement_timestamp()").Scan(&commit); err != nil {
						return nil, err
					}
					if fail {
						return nil, idem.Permanent(errors.New("no"))
					}
					return []byte("ok"), nil
				})
				if fail != (err != nil) {
					t.Fatalf("%s: Do: %v", name, err)
				}
				rec, err := e.record(t, key)
				if err != nil {
					t.Fatal(err)
				}
				retention := time.Hour
				if fail {
					retention = time.Minute
				}
				if lo, hi := commit.Add(retention), now.Add(retention+delay+time.Second+time.Second); rec.ExpiresAt.Before(lo) || rec.ExpiresAt.After(hi) {
					t.Fatalf("%s fail=%v delay=%v: expires at %v, want within [%v, %v]", name, fail, delay, rec.ExpiresAt, lo, hi)
				}
			}
		}
	}
}
