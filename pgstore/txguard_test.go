package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
	"github.com/jackc/pgx/v5"
)

// txEnv is an env with a ledger table, the business side effect of the
// transactional tests, and a TxGuard over the same pool.
type txEnv struct {
	*env
	ledger string // quoted table name
	g      *pgstore.TxGuard
}

func newTxEnv(t *testing.T, maxConns int32, cfg txConf) *txEnv {
	t.Helper()
	e := newEnv(t, maxConns)
	ledger := pgx.Identifier{e.schema, "ledger"}.Sanitize()
	if _, err := e.pool.Exec(context.Background(), "CREATE TABLE "+ledger+" (id bigserial PRIMARY KEY, key text NOT NULL, amount int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg.Table = e.table
	cfg.Namespace = "payments"
	g, err := pgstore.NewTxGuard(e.pool, cfg.Config, cfg.TxConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &txEnv{env: e, ledger: ledger, g: g}
}

// pay is the business write: one ledger row; the value names it.
func (e *txEnv) pay(key string) pgstore.TxFunc {
	return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		var id int64
		err := tx.QueryRow(ctx, "INSERT INTO "+e.ledger+" (key, amount) VALUES ($1, 10) RETURNING id", key).Scan(&id)
		return fmt.Appendf(nil, "receipt %d", id), err
	}
}

func (e *txEnv) ledgerRows(t *testing.T, key string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+e.ledger+" WHERE key = $1", key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// record returns the stored record of key in the TxGuard's namespace.
func (e *txEnv) record(t *testing.T, key string) (storage.Record, error) {
	t.Helper()
	return e.store.Get(context.Background(), storage.StoreKey("payments", key))
}

func TestTxGuardConcurrentDuplicatesOneEffect(t *testing.T) {
	t.Parallel()
	const n = 32
	e := newTxEnv(t, 8, txConf{TxConfig: pgstore.TxConfig{LockTimeout: 20 * time.Second}})
	monitor := newPool(t, 1) // e.pool's connections are all busy
	var runs, fresh atomic.Int32
	values := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := e.g.Do(context.Background(), "order-1", []byte("pay 10"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				runs.Add(1)
				// Hold the key until duplicates wait on its row lock.
				awaitLockWaiters(t, monitor, e.store.Table(), 3)
				return e.pay("order-1")(ctx, tx)
			})
			if err != nil {
				t.Errorf("Do: %v", err)
				return
			}
			if !res.Replayed {
				fresh.Add(1)
			}
			values[i] = string(res.Value)
		})
	}
	close(start)
	wg.Wait()
	if runs.Load() != 1 || fresh.Load() != 1 {
		t.Fatalf("%d concurrent Do: fn ran %d times, %d fresh results; want 1 and 1", n, runs.Load(), fresh.Load())
	}
	for i, v := range values {
		if v != values[0] || !strings.HasPrefix(v, "receipt ") {
			t.Fatalf("goroutine %d got %q, goroutine 0 %q: want one receipt for all", i, v, values[0])
		}
	}
	if rows := e.ledgerRows(t, "order-1"); rows != 1 {
		t.Fatalf("%d ledger rows, want 1", rows)
	}
}

func TestTxGuardConnectionKilledMidway(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{})
	ctx := testCtx(t)
	_, err := e.g.Do(ctx, "order-2", []byte("pay 10"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		if _, err := e.pay("order-2")(ctx, tx); err != nil {
			return nil, err
		}
		var pid int32
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return nil, err
		}
		var killed bool
		if err := e.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", pid).Scan(&killed); err != nil || !killed {
			t.Errorf("pg_terminate_backend(%d): %v %v", pid, killed, err)
		}
		_, err := tx.Exec(ctx, "SELECT 1")
		return []byte("unreachable"), err
	})
	if err == nil {
		t.Fatal("Do over a killed connection succeeded")
	}
	if rows := e.ledgerRows(t, "order-2"); rows != 0 {
		t.Fatalf("%d ledger rows after the kill, want 0", rows)
	}
	if r, err := e.record(t, "order-2"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("record after the kill: %+v %v, want none", r, err)
	}
	for i := range 2 {
		res, err := e.g.Do(ctx, "order-2", []byte("pay 10"), e.pay("order-2"))
		if err != nil || res.Replayed != (i == 1) {
			t.Fatalf("retry %d: %q replayed=%v %v", i, res.Value, res.Replayed, err)
		}
	}
	if rows := e.ledgerRows(t, "order-2"); rows != 1 {
		t.Fatalf("%d ledger rows after the retries, want 1", rows)
	}
}

func TestTxGuardPermanentErrorStoredWritesRolledBack(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{})
	ctx := testCtx(t)
	declined := errors.New("card declined")
	runs := 0
	for i := range 2 {
		_, err := e.g.Do(ctx, "order-3", []byte("pay 10"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			runs++
			if _, err := e.pay("order-3")(ctx, tx); err != nil {
				return nil, err
			}
			return nil, idem.Permanent(declined)
		})
		pe, ok := errors.AsType[*idem.PermanentError](err)
		if !ok || err.Error() != "card declined" || pe.Replayed != (i == 1) {
			t.Fatalf("Do %d: %v, want the permanent error (replayed=%v)", i, err, i == 1)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
	if rows := e.ledgerRows(t, "order-3"); rows != 0 {
		t.Fatalf("%d ledger rows, want 0: fn's writes roll back", rows)
	}
	r, err := e.record(t, "order-3")
	if err != nil || r.Status != storage.StatusFailed || storage.DecodeFailure(r.Result).Error() != "card declined" {
		t.Fatalf("record %+v %v, want Failed(card declined)", r, err)
	}
}

func TestTxGuardRetryableErrorLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{})
	ctx := testCtx(t)
	flaky := errors.New("gateway timeout")
	_, err := e.g.Do(ctx, "order-4", []byte("pay 10"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		if _, err := e.pay("order-4")(ctx, tx); err != nil {
			return nil, err
		}
		return nil, flaky
	})
	if !errors.Is(err, flaky) {
		t.Fatalf("Do: %v, want fn's error", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("fn's panic did not reach the caller")
			}
		}()
		e.g.Do(ctx, "order-4", []byte("pay 10"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			e.pay("order-4")(ctx, tx)
			panic("boom")
		})
	}()
	if rows := e.ledgerRows(t, "order-4"); rows != 0 {
		t.Fatalf("%d ledger rows, want 0", rows)
	}
	if _, err := e.record(t, "order-4"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("record: %v, want none", err)
	}
	if res, err := e.g.Do(ctx, "order-4", []byte("pay 10"), e.pay("order-4")); err != nil || res.Replayed {
		t.Fatalf("retry: %v replayed=%v", err, res.Replayed)
	}
	if rows := e.ledgerRows(t, "order-4"); rows != 1 {
		t.Fatalf("%d ledger rows after the retry, want 1", rows)
	}
}

func TestTxGuardLockTimeoutThenReplay(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{TxConfig: pgstore.TxConfig{LockTimeout: 50 * time.Millisecond}})
	ctx := testCtx(t)
	inside, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := e.g.Do(ctx, "order-5", []byte("pay 10"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			close(inside)
			<-release
			return []byte("done"), nil
		})
		held <- err
	}()
	<-inside
	start := time.Now()
	_, err := e.g.Do(ctx, "order-5", []byte("pay 10"), e.pay("order-5"))
	if !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("duplicate while the holder's transaction is open: %v, want ErrInProgress", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("duplicate answered after %v, before the lock timeout", waited)
	}
	// The lock timeout was the claim's only: fn's statements wait as long
	// as the session's setting says.
	_, err = e.g.Do(ctx, "order-5b", nil, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		var lt string
		err := tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&lt)
		return []byte(lt), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := e.record(t, "order-5b"); string(r.Result) == "50ms" {
		t.Fatalf("fn ran with the claim's lock_timeout %q", r.Result)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	res, err := e.g.Do(ctx, "order-5", []byte("pay 10"), e.pay("order-5"))
	if err != nil || !res.Replayed || string(res.Value) != "done" {
		t.Fatalf("duplicate after the holder committed: %q replayed=%v %v", res.Value, res.Replayed, err)
	}
}

func TestTxGuardDoTxInCallerTransaction(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{})
	ctx := testCtx(t)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO "+e.ledger+" (key, amount) VALUES ('before', 1)"); err != nil {
		t.Fatal(err)
	}
	flaky := errors.New("flaky")
	_, err = e.g.DoTx(ctx, tx, "a", nil, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		e.pay("a")(ctx, tx)
		_, err := tx.Exec(ctx, "SELECT 1/0") // the transaction is aborted here
		return nil, errors.Join(flaky, err)
	})
	if !errors.Is(err, flaky) {
		t.Fatalf("DoTx: %v, want fn's error", err)
	}
	// tx is usable: DoTx rolled back to its savepoint.
	if _, err := tx.Exec(ctx, "INSERT INTO "+e.ledger+" (key, amount) VALUES ('after', 1)"); err != nil {
		t.Fatalf("tx after a failed DoTx: %v", err)
	}
	if res, err := e.g.DoTx(ctx, tx, "b", nil, e.pay("b")); err != nil || res.Replayed {
		t.Fatalf("DoTx b: %v", err)
	}
	_, err = e.g.DoTx(ctx, tx, "c", nil, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		e.pay("c")(ctx, tx)
		return nil, idem.Permanent(errors.New("no"))
	})
	if !idem.IsPermanent(err) {
		t.Fatalf("DoTx c: %v, want the permanent error", err)
	}
	// Nothing is visible before the caller commits.
	if _, err := e.record(t, "b"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("record b before commit: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int{"before": 1, "after": 1, "a": 0, "b": 1, "c": 0} {
		if got := e.ledgerRows(t, key); got != want {
			t.Errorf("ledger %q: %d rows, want %d", key, got, want)
		}
	}
	if _, err := e.record(t, "a"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("record a: %v, want none", err)
	}
	if r, err := e.record(t, "b"); err != nil || r.Status != storage.StatusCompleted {
		t.Errorf("record b: %+v %v, want Completed", r, err)
	}
	if r, err := e.record(t, "c"); err != nil || r.Status != storage.StatusFailed {
		t.Errorf("record c: %+v %v, want Failed", r, err)
	}
	// A duplicate in another transaction replays, and leaves that
	// transaction usable.
	tx2, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(ctx)
	res, err := e.g.DoTx(ctx, tx2, "b", nil, e.pay("b"))
	if err != nil || !res.Replayed || !strings.HasPrefix(string(res.Value), "receipt ") {
		t.Fatalf("duplicate DoTx: %q replayed=%v %v", res.Value, res.Replayed, err)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatalf("commit after a duplicate: %v", err)
	}
}

func TestTxGuardRefusals(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{Config: idem.Config{MaxKeyLen: 8}})
	ctx := testCtx(t)
	if _, err := e.g.Do(ctx, "k", []byte("A"), e.pay("k")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.g.Do(ctx, "k", []byte("B"), e.pay("k")); !errors.Is(err, storage.ErrKeyReused) {
		t.Fatalf("other payload: %v, want ErrKeyReused", err)
	}
	for _, k := range []string{"", "123456789"} {
		if _, err := e.g.Do(ctx, k, nil, e.pay(k)); !errors.Is(err, idem.ErrInvalidKey) {
			t.Fatalf("key %q: %v, want ErrInvalidKey", k, err)
		}
	}
	// A plain Guard holding the key with a live lease: ErrInProgress.
	c, err := e.store.Claim(ctx, storage.ClaimArgs{Key: storage.StoreKey("payments", "held"), Fingerprint: idem.SHA256Fingerprint(nil, nil), Lease: time.Minute, Retention: time.Hour})
	if err != nil || c.Outcome != storage.Acquired {
		t.Fatal(c.Outcome, err)
	}
	if _, err := e.g.Do(ctx, "held", nil, e.pay("held")); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("key held by a lease: %v, want ErrInProgress", err)
	}
	if rows := e.ledgerRows(t, "k") + e.ledgerRows(t, "held"); rows != 1 {
		t.Fatalf("%d ledger rows, want 1", rows)
	}
	for field, cfg := range map[string]txConf{
		"TxConfig.Table":       {TxConfig: pgstore.TxConfig{Table: "a b"}},
		"TxConfig.LockTimeout": {TxConfig: pgstore.TxConfig{LockTimeout: time.Microsecond}},
		"Config.Retention":     {Config: idem.Config{Retention: -1}},
		"Config.MaxKeyLen":     {Config: idem.Config{MaxKeyLen: -1}},
	} {
		if _, err := pgstore.NewTxGuard(e.pool, cfg.Config, cfg.TxConfig); err == nil || !strings.HasPrefix(err.Error(), "pgstore: ") || !strings.Contains(err.Error(), field) {
			t.Errorf("NewTxGuard with a bad %s: %v, want an error starting pgstore: and naming the field", field, err)
		}
	}
}

// txConf is a TxGuard's two configurations, for the tests' helpers.
type txConf struct {
	idem.Config
	pgstore.TxConfig
}
