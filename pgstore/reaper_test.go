package pgstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
)

// fill stores records: expired ones (completed, failed and in progress,
// all past their expiry) and live ones, and returns how many of each. It
// waits until the server sees the expired ones expired.
func fill(t *testing.T, e *env) (expired, live int) {
	t.Helper()
	ctx := testCtx(t)
	s := e.store
	claim := func(key string, lease, retention time.Duration) storage.Token {
		c, err := s.Claim(ctx, storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: lease, Retention: retention})
		if err != nil || c.Outcome != storage.Acquired {
			t.Fatalf("Claim %q: %v %v", key, c.Outcome, err)
		}
		return c.Token
	}
	for i := range 25 {
		k := fmt.Sprint("expired-completed-", i)
		if err := s.Complete(ctx, k, claim(k, time.Minute, time.Hour), []byte("v"), time.Millisecond); err != nil {
			t.Fatal(err)
		}
		k = fmt.Sprint("expired-failed-", i)
		if err := s.Fail(ctx, k, claim(k, time.Minute, time.Hour), []byte("Px"), time.Millisecond); err != nil {
			t.Fatal(err)
		}
		claim(fmt.Sprint("expired-abandoned-", i), time.Millisecond, time.Millisecond)
		expired += 3

		k = fmt.Sprint("live-completed-", i)
		if err := s.Complete(ctx, k, claim(k, time.Minute, time.Hour), []byte("v"), time.Hour); err != nil {
			t.Fatal(err)
		}
		claim(fmt.Sprint("live-in-progress-", i), time.Minute, time.Millisecond) // lease keeps it
		claim(fmt.Sprint("live-lease-over-", i), time.Millisecond, time.Hour)    // retention keeps it
		live += 3
	}
	for _, k := range []string{"expired-completed-24", "expired-failed-24", "expired-abandoned-24"} {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			if _, err := s.Get(ctx, k); errors.Is(err, storage.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never expired", k)
			}
		}
	}
	return expired, live
}

func TestReapDeletesOnlyExpired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	expired, live := fill(t, e)
	if n := e.count(t); n != expired+live {
		t.Fatalf("%d rows before reaping, want %d", n, expired+live)
	}
	deleted, err := e.store.Reap(testCtx(t), 10) // several batches
	if err != nil || deleted != expired {
		t.Fatalf("Reap = %d, %v; want %d", deleted, err, expired)
	}
	if n := e.count(t); n != live {
		t.Fatalf("%d rows after reaping, want the %d live ones", n, live)
	}
	for i := range 25 {
		for _, k := range []string{"live-completed-", "live-in-progress-", "live-lease-over-"} {
			if _, err := e.store.Get(testCtx(t), fmt.Sprint(k, i)); err != nil {
				t.Fatalf("Get(%s%d) after reaping: %v", k, i, err)
			}
		}
	}
	if deleted, err := e.store.Reap(testCtx(t), 0); err != nil || deleted != 0 {
		t.Fatalf("second Reap = %d, %v; want 0", deleted, err)
	}
}

func TestReaperRunsInBackgroundUntilClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	expired, live := fill(t, e)
	r, err := pgstore.NewReaper(e.store, pgstore.ReaperConfig{Interval: 5 * time.Millisecond, Batch: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	for deadline := time.Now().Add(20 * time.Second); e.count(t) != live; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left after 20s, want the %d live ones (of %d)", e.count(t), live, expired+live)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	for _, cfg := range []pgstore.ReaperConfig{{Interval: -1}, {Batch: -1}, {Timeout: -1}} {
		if _, err := pgstore.NewReaper(e.store, cfg); err == nil {
			t.Errorf("NewReaper(%+v): no error", cfg)
		}
	}
}

// A reap in flight when Close is called is cancelled: Close does not wait
// for a slow database.
func TestReaperCloseCancelsReap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	ctx := testCtx(t)
	// Lock the whole table so the reaper's DELETE … SKIP LOCKED subquery
	// still has to wait for the table lock.
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE "+e.store.Table()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	r, err := pgstore.NewReaper(e.store, pgstore.ReaperConfig{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	awaitLockWaiters(t, e.pool, e.store.Table(), 1) // the reap is in flight
	closed := make(chan struct{})
	go func() {
		r.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits for a blocked reap after 10s")
	}
}

// TestReapKeepsARecordClaimedAgain: reap, which idem reap runs beside live
// traffic, deletes a record only while it is expired: a key claimed again
// while the reap runs (its expired row replaced by a new record) keeps the
// new holder's record, as purge keeps one taken over at its prompt.
func TestReapKeepsARecordClaimedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 8)
	ctx := testCtx(t)
	const keys = 40
	args := func(i int) storage.ClaimArgs {
		return storage.ClaimArgs{Key: fmt.Sprint("k", i), Fingerprint: []byte("fp"), Lease: time.Millisecond, Retention: time.Millisecond}
	}
	for i := range keys {
		if _, err := e.store.Claim(ctx, args(i)); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := e.store.Get(ctx, fmt.Sprint("k", keys-1)); errors.Is(err, storage.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the records never expired")
		}
	}
	tokens := make([]storage.Token, keys)
	done := make(chan error)
	go func() {
		var err error
		for range 20 {
			if _, err = e.store.Reap(ctx, 3); err != nil {
				break
			}
		}
		done <- err
	}()
	for i := range keys {
		a := args(i)
		a.Lease, a.Retention = time.Hour, time.Hour
		c, err := e.store.Claim(ctx, a)
		if err != nil || c.Outcome != storage.Acquired {
			t.Fatalf("claim of expired k%d: %v %v", i, c.Outcome, err)
		}
		tokens[i] = c.Token
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Reap(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for i, tok := range tokens {
		if r, err := e.store.Get(ctx, fmt.Sprint("k", i)); err != nil || r.Token != tok {
			t.Errorf("k%d after the reaps: %+v %v, want the new holder's record (token %d)", i, r, err, tok)
		}
	}
}
