package pgstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/txguard/txguardtest"
	"github.com/idemgo/idem/pgstore"
)

// sqlEnv is a txEnv's database through database/sql (pgx's stdlib
// driver) and an SQLTxGuard over it.
func newSQLTxGuard(t *testing.T, cfg txConf) (*txEnv, *sql.DB, *pgstore.SQLTxGuard) {
	t.Helper()
	e := newTxEnv(t, 24, cfg)
	db := stdlib.OpenDBFromPool(e.pool)
	t.Cleanup(func() { db.Close() })
	cfg.Table, cfg.Namespace = e.table, "payments"
	g, err := pgstore.NewSQLTxGuard(db, cfg.Config, cfg.TxConfig)
	if err != nil {
		t.Fatal(err)
	}
	return e, db, g
}

func TestSQLTxGuard(t *testing.T) {
	t.Parallel()
	txguardtest.Run(t, func(t *testing.T) *txguardtest.Env {
		e, db, g := newSQLTxGuard(t, txConf{TxConfig: pgstore.TxConfig{LockTimeout: 30 * time.Second}})
		return &txguardtest.Env{
			DB: db, Store: e.store, Namespace: "payments", Records: e.store.Table(), Ledger: e.ledger,
			Do: func(ctx context.Context, key string, payload []byte, fn func(context.Context, *sql.Tx) ([]byte, error)) (idem.Result, error) {
				return g.Do(ctx, key, payload, fn)
			},
			DoTx: func(ctx context.Context, tx *sql.Tx, key string, payload []byte, fn func(context.Context, *sql.Tx) ([]byte, error)) (idem.Result, error) {
				return g.DoTx(ctx, tx, key, payload, fn)
			},
		}
	})
}

// An SQLTxGuard and a TxGuard over pgx with the same table and namespace
// share records: each replays what the other stored.
func TestSQLTxGuardSharesRecordsWithTxGuard(t *testing.T) {
	t.Parallel()
	e, _, g := newSQLTxGuard(t, txConf{})
	ctx := testCtx(t)
	res, err := g.Do(ctx, "a", nil, func(ctx context.Context, tx *sql.Tx) ([]byte, error) { return []byte("sql"), nil })
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.g.Do(ctx, "a", nil, e.pay("a")); err != nil || !got.Replayed || string(got.Value) != string(res.Value) {
		t.Fatalf("TxGuard after SQLTxGuard: %q replayed=%v %v", got.Value, got.Replayed, err)
	}
	if _, err := e.g.Do(ctx, "b", nil, func(ctx context.Context, tx pgx.Tx) ([]byte, error) { return []byte("pgx"), nil }); err != nil {
		t.Fatal(err)
	}
	if got, err := g.Do(ctx, "b", nil, func(ctx context.Context, tx *sql.Tx) ([]byte, error) { return nil, nil }); err != nil || !got.Replayed || string(got.Value) != "pgx" {
		t.Fatalf("SQLTxGuard after TxGuard: %q replayed=%v %v", got.Value, got.Replayed, err)
	}
}

// A duplicate waits for the holder's open transaction at most
// LockTimeout, then gets ErrInProgress; fn's statements run with the
// session's lock_timeout, not the claim's.
func TestSQLTxGuardLockTimeout(t *testing.T) {
	t.Parallel()
	_, db, g := newSQLTxGuard(t, txConf{TxConfig: pgstore.TxConfig{LockTimeout: 50 * time.Millisecond}})
	ctx := testCtx(t)
	inside, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, "k", nil, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			close(inside)
			<-release
			var lt string
			err := tx.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&lt)
			return []byte(lt), err
		})
		held <- err
	}()
	<-inside
	start := time.Now()
	if _, err := g.Do(ctx, "k", nil, func(context.Context, *sql.Tx) ([]byte, error) { return nil, nil }); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("duplicate while the holder's transaction is open: %v, want ErrInProgress", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("duplicate answered after %v, before the lock timeout", waited)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	res, err := g.Do(ctx, "k", nil, func(context.Context, *sql.Tx) ([]byte, error) { return nil, nil })
	if err != nil || !res.Replayed || string(res.Value) == "50ms" {
		t.Fatalf("after the holder committed: %q replayed=%v %v; want its value, not the claim's lock_timeout", res.Value, res.Replayed, err)
	}
	if _, err := pgstore.NewSQLTxGuard(db, idem.Config{FailOpen: true}, pgstore.TxConfig{}); err == nil || !strings.Contains(err.Error(), "idem.Config.FailOpen") {
		t.Fatalf("FailOpen: %v, want an error naming idem.Config.FailOpen", err)
	}
}
