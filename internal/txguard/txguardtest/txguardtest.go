// Package txguardtest is the behaviour suite of idem's TxGuards over
// database/sql: pgstore's SQLTxGuard on PostgreSQL and sqlitestore's
// TxGuard on SQLite each run it from their tests with one call, so that
// both are held to the same cases, those of pgstore's TxGuard over pgx:
// the effects and the record commit together, a rolled back operation
// leaves nothing, duplicates replay, a stale holder is fenced.
package txguardtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// Refuses checks a transactional executor's constructor, newGuard, as
// txguard.NewExec refuses: with a Config that sets a field no TxGuard can
// honour (Lease, MaxAttempts, CacheSize, CacheTTL, FailOpen), it must fail
// with an error that starts "pkg: idem.Config.Field:".
func Refuses(t *testing.T, pkg string, newGuard func(idem.Config) error) {
	t.Helper()
	for field, cfg := range map[string]idem.Config{
		"Lease":       {Lease: time.Minute},
		"MaxAttempts": {MaxAttempts: 3},
		"CacheSize":   {CacheSize: 100},
		"CacheTTL":    {CacheTTL: time.Minute},
		"FailOpen":    {FailOpen: true},
	} {
		want := pkg + ": idem.Config." + field + ":"
		if err := newGuard(cfg); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("a TxGuard with %s: %v, want an error starting %q", field, err, want)
		}
	}
}

// Env is a TxGuard over database/sql under test and the database it
// writes to. Its SQL is written for both PostgreSQL and SQLite ($n
// parameters, RETURNING).
type Env struct {
	// DB is the database of the records and the ledger.
	DB *sql.DB
	// Store is a store over the TxGuard's records table.
	Store storage.Store
	// Namespace is the TxGuard's Config.Namespace.
	Namespace string
	// Records is the records table's quoted name.
	Records string
	// Ledger is the quoted name of a table of the business side effect:
	// columns id (generated), key (text) and amount (integer).
	Ledger string
	// Do and DoTx are the TxGuard's. Its lock timeout is long (30s): no
	// case waits for it.
	Do   func(ctx context.Context, key string, payload []byte, fn func(context.Context, *sql.Tx) ([]byte, error)) (idem.Result, error)
	DoTx func(ctx context.Context, tx *sql.Tx, key string, payload []byte, fn func(context.Context, *sql.Tx) ([]byte, error)) (idem.Result, error)
}

// Run runs the suite; newEnv returns the Env of one case, which may be
// shared: each case uses keys of its own.
func Run(t *testing.T, newEnv func(t *testing.T) *Env) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, &env{Env: newEnv(t), t: t, prefix: c.name + "/"})
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"EffectsAndRecordCommitTogether", effectsAndRecordTogether},
	{"ConcurrentDuplicatesOneEffect", concurrentDuplicates},
	{"RolledBackHandlerLeavesNothing", rolledBackLeavesNothing},
	{"PermanentErrorStoredWritesRolledBack", permanentError},
	{"StaleHolderIsFenced", staleHolderFenced},
	{"OutcomeMatchingNoRecordCommitsNothing", outcomeMatchingNoRecord},
	{"DoTxInTheCallersTransaction", doTxInCallersTx},
	{"RefusedKeys", refusedKeys},
}

type env struct {
	*Env
	t      *testing.T
	prefix string // of the case's keys
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *env) key(k string) string { return e.prefix + k }

// pay is the business write: one ledger row for key; the value names it.
func (e *env) pay(key string) func(context.Context, *sql.Tx) ([]byte, error) {
	return func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		var id int64
		err := tx.QueryRowContext(ctx, "INSERT INTO "+e.Ledger+" (key, amount) VALUES ($1, 10) RETURNING id", key).Scan(&id)
		return fmt.Appendf(nil, "receipt %d", id), err
	}
}

func (e *env) ledgerRows(key string) int {
	e.t.Helper()
	var n int
	if err := e.DB.QueryRowContext(e.ctx(), "SELECT count(*) FROM "+e.Ledger+" WHERE key = $1", key).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) record(key string) (storage.Record, error) {
	return e.Store.Get(e.ctx(), storage.StoreKey(e.Namespace, key))
}

func effectsAndRecordTogether(t *testing.T, e *env) {
	k := e.key("order")
	runs := 0
	var first idem.Result
	for i := range 3 {
		res, err := e.Do(e.ctx(), k, []byte("pay 10"), func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			runs++
			return e.pay(k)(ctx, tx)
		})
		if err != nil || res.Replayed != (i > 0) || !strings.HasPrefix(string(res.Value), "receipt ") {
			t.Fatalf("Do %d: %q replayed=%v %v; want the receipt, replayed after the first", i, res.Value, res.Replayed, err)
		}
		if i == 0 {
			first = res
		} else if string(res.Value) != string(first.Value) {
			t.Fatalf("Do %d replayed %q, want the first value %q", i, res.Value, first.Value)
		}
	}
	if runs != 1 || e.ledgerRows(k) != 1 {
		t.Fatalf("fn ran %d times, %d ledger rows; want 1 and 1", runs, e.ledgerRows(k))
	}
	r, err := e.record(k)
	if err != nil || r.Status != storage.StatusCompleted || string(r.Result) != string(first.Value) {
		t.Fatalf("record %+v %v, want Completed with the receipt", r, err)
	}
}

func concurrentDuplicates(t *testing.T, e *env) {
	const n = 16
	k := e.key("order")
	var runs, fresh, started atomic.Int32
	values := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			started.Add(1)
			res, err := e.Do(e.ctx(), k, []byte("pay 10"), func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				runs.Add(1)
				// Hold the key until every duplicate has called Do.
				for deadline := time.Now().Add(10 * time.Second); started.Load() < n && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				return e.pay(k)(ctx, tx)
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
	wg.Wait()
	if t.Failed() {
		return
	}
	if runs.Load() != 1 || fresh.Load() != 1 {
		t.Fatalf("%d concurrent Do: fn ran %d times, %d fresh results; want 1 and 1", n, runs.Load(), fresh.Load())
	}
	for i, v := range values {
		if v != values[0] || !strings.HasPrefix(v, "receipt ") {
			t.Fatalf("goroutine %d got %q, goroutine 0 %q: want one receipt for all", i, v, values[0])
		}
	}
	if rows := e.ledgerRows(k); rows != 1 {
		t.Fatalf("%d ledger rows, want 1", rows)
	}
}

func rolledBackLeavesNothing(t *testing.T, e *env) {
	k := e.key("order")
	flaky := errors.New("gateway timeout")
	_, err := e.Do(e.ctx(), k, []byte("pay 10"), func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		if _, err := e.pay(k)(ctx, tx); err != nil {
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
		e.Do(e.ctx(), k, []byte("pay 10"), func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			e.pay(k)(ctx, tx)
			panic("boom")
		})
	}()
	if rows := e.ledgerRows(k); rows != 0 {
		t.Fatalf("%d ledger rows after a failed and a panicking fn, want 0", rows)
	}
	if r, err := e.record(k); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("record after rollbacks: %+v %v, want none", r, err)
	}
	for i := range 2 {
		res, err := e.Do(e.ctx(), k, []byte("pay 10"), e.pay(k))
		if err != nil || res.Replayed != (i == 1) {
			t.Fatalf("retry %d: %q replayed=%v %v", i, res.Value, res.Replayed, err)
		}
	}
	if rows := e.ledgerRows(k); rows != 1 {
		t.Fatalf("%d ledger rows after the retries, want 1", rows)
	}
}

func permanentError(t *testing.T, e *env) {
	k := e.key("order")
	runs := 0
	for i := range 2 {
		_, err := e.Do(e.ctx(), k, []byte("pay 10"), func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			runs++
			if _, err := e.pay(k)(ctx, tx); err != nil {
				return nil, err
			}
			return nil, idem.Permanent(errors.New("card declined"))
		})
		pe, ok := errors.AsType[*idem.PermanentError](err)
		if !ok || err.Error() != "card declined" || pe.Replayed != (i == 1) {
			t.Fatalf("Do %d: %v, want the permanent error (replayed=%v)", i, err, i == 1)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
	if rows := e.ledgerRows(k); rows != 0 {
		t.Fatalf("%d ledger rows, want 0: fn's writes roll back", rows)
	}
	r, err := e.record(k)
	if err != nil || r.Status != storage.StatusFailed || storage.DecodeFailure(r.Result).Error() != "card declined" {
		t.Fatalf("record %+v %v, want Failed(card declined)", r, err)
	}
}

// A plain Guard's holder whose lease ran out is taken over by the TxGuard,
// whose outcome commits; the stale holder's outcome is then refused.
func staleHolderFenced(t *testing.T, e *env) {
	k := e.key("order")
	sk := storage.StoreKey(e.Namespace, k)
	stale, err := e.Store.Claim(e.ctx(), storage.ClaimArgs{Key: sk, Fingerprint: idem.SHA256Fingerprint(nil, []byte("pay 10")),
		Lease: 50 * time.Millisecond, Retention: time.Hour})
	if err != nil || stale.Outcome != storage.Acquired {
		t.Fatalf("plain claim: %v %v", stale.Outcome, err)
	}
	var res idem.Result
	for deadline := time.Now().Add(20 * time.Second); ; {
		res, err = e.Do(e.ctx(), k, []byte("pay 10"), e.pay(k))
		if !errors.Is(err, idem.ErrInProgress) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the lease is live: wait for it to end
	}
	if err != nil || res.Replayed {
		t.Fatalf("Do after the plain holder's lease ended: %q replayed=%v %v, want a fresh run", res.Value, res.Replayed, err)
	}
	if err := e.Store.Complete(e.ctx(), sk, stale.Token, []byte("stale"), time.Hour); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the stale holder's Complete: %v, want ErrLeaseLost", err)
	}
	if err := e.Store.Release(e.ctx(), sk, stale.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the stale holder's Release: %v, want ErrLeaseLost", err)
	}
	r, err := e.record(k)
	if err != nil || r.Status != storage.StatusCompleted || string(r.Result) != string(res.Value) || r.Attempt != 2 {
		t.Fatalf("record %+v %v, want the TxGuard's outcome, attempt 2", r, err)
	}
	if rows := e.ledgerRows(k); rows != 1 {
		t.Fatalf("%d ledger rows, want 1", rows)
	}
}

// An outcome that matches no record (fn deleted its own claim) must not
// let fn's writes commit: nothing commits, the error says so, and a retry
// runs fn.
func outcomeMatchingNoRecord(t *testing.T, e *env) {
	k := e.key("vanish")
	_, err := e.Do(e.ctx(), k, nil, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		if _, err := e.pay(k)(ctx, tx); err != nil {
			return nil, err
		}
		_, err := tx.ExecContext(ctx, "DELETE FROM "+e.Records+" WHERE key = $1", []byte(storage.StoreKey(e.Namespace, k)))
		return []byte("paid"), err
	})
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Do whose fn deleted its record: %v, want ErrLeaseLost", err)
	}
	if rows := e.ledgerRows(k); rows != 0 {
		t.Fatalf("%d ledger rows, want 0: nothing commits without its outcome", rows)
	}
	if res, err := e.Do(e.ctx(), k, nil, e.pay(k)); err != nil || res.Replayed || e.ledgerRows(k) != 1 {
		t.Fatalf("retry: %q replayed=%v %v, %d ledger rows; want a fresh run", res.Value, res.Replayed, err, e.ledgerRows(k))
	}
}

func doTxInCallersTx(t *testing.T, e *env) {
	ctx := e.ctx()
	k := func(s string) string { return e.key(s) }
	before, after := k("before"), k("after")
	err := func() error {
		tx, err := e.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+e.Ledger+" (key, amount) VALUES ($1, 1)", before); err != nil {
			return err
		}
		flaky := errors.New("flaky")
		_, err = e.DoTx(ctx, tx, k("a"), nil, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			if _, err := e.pay(k("a"))(ctx, tx); err != nil {
				return nil, err
			}
			return nil, flaky
		})
		if !errors.Is(err, flaky) {
			return fmt.Errorf("DoTx a: %v, want fn's error", err)
		}
		// tx is usable: DoTx rolled back to its savepoint.
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+e.Ledger+" (key, amount) VALUES ($1, 1)", after); err != nil {
			return fmt.Errorf("tx after a failed DoTx: %v", err)
		}
		if res, err := e.DoTx(ctx, tx, k("b"), nil, e.pay(k("b"))); err != nil || res.Replayed {
			return fmt.Errorf("DoTx b: %v replayed=%v", err, res.Replayed)
		}
		_, err = e.DoTx(ctx, tx, k("c"), nil, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			if _, err := e.pay(k("c"))(ctx, tx); err != nil {
				return nil, err
			}
			return nil, idem.Permanent(errors.New("no"))
		})
		if !idem.IsPermanent(err) {
			return fmt.Errorf("DoTx c: %v, want the permanent error", err)
		}
		return tx.Commit()
	}()
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int{before: 1, after: 1, k("a"): 0, k("b"): 1, k("c"): 0} {
		if got := e.ledgerRows(key); got != want {
			t.Errorf("ledger %q: %d rows, want %d", key, got, want)
		}
	}
	if _, err := e.record(k("a")); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("record a: %v, want none", err)
	}
	if r, err := e.record(k("b")); err != nil || r.Status != storage.StatusCompleted {
		t.Errorf("record b: %+v %v, want Completed", r, err)
	}
	if r, err := e.record(k("c")); err != nil || r.Status != storage.StatusFailed {
		t.Errorf("record c: %+v %v, want Failed", r, err)
	}
	// A duplicate in another transaction replays, and leaves that
	// transaction usable.
	tx, err := e.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	res, err := e.DoTx(ctx, tx, k("b"), nil, e.pay(k("b")))
	if err != nil || !res.Replayed || !strings.HasPrefix(string(res.Value), "receipt ") {
		t.Fatalf("duplicate DoTx: %q replayed=%v %v", res.Value, res.Replayed, err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+e.Ledger+" (key, amount) VALUES ($1, 1)", k("after-duplicate")); err != nil {
		t.Fatalf("tx after a duplicate: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit after a duplicate: %v", err)
	}
	if n := e.ledgerRows(k("b")); n != 1 {
		t.Fatalf("%d ledger rows of b, want 1", n)
	}
}

func refusedKeys(t *testing.T, e *env) {
	k := e.key("k")
	if _, err := e.Do(e.ctx(), k, []byte("A"), e.pay(k)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Do(e.ctx(), k, []byte("B"), e.pay(k)); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("other payload: %v, want ErrKeyReused", err)
	}
	if _, err := e.Do(e.ctx(), "", nil, e.pay("")); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("empty key: %v, want ErrInvalidKey", err)
	}
	if _, err := e.Do(e.ctx(), k, nil, nil); err == nil {
		t.Fatal("nil fn: no error")
	}
	// A plain Guard holding the key with a live lease: ErrInProgress.
	held := e.key("held")
	c, err := e.Store.Claim(e.ctx(), storage.ClaimArgs{Key: storage.StoreKey(e.Namespace, held), Fingerprint: idem.SHA256Fingerprint(nil, nil),
		Lease: time.Minute, Retention: time.Hour})
	if err != nil || c.Outcome != storage.Acquired {
		t.Fatal(c.Outcome, err)
	}
	if _, err := e.Do(e.ctx(), held, nil, e.pay(held)); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("key held by a lease: %v, want ErrInProgress", err)
	}
	if rows := e.ledgerRows(k) + e.ledgerRows(held); rows != 1 {
		t.Fatalf("%d ledger rows, want 1", rows)
	}
}
