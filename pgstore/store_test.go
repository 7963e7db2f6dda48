package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 16)
	idemtest.Run(t, func(t *testing.T) storage.Store { return e.store })
}

func TestNewValidatesTable(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a b", "t;drop table x", `"t`, `"t"x`, `""`, "s.t.u", "T", "1t", ".t", "t.", "s..t", strings.Repeat("t", 49), "idem-records", "tä"} {
		if _, err := pgstore.New(dummyDB{}, pgstore.Config{Table: name}); err == nil || !strings.HasPrefix(err.Error(), "pgstore: Config.Table") {
			t.Errorf("New with table %q: %v, want an error naming Config.Table", name, err)
		}
		if err := pgstore.Migrate(context.Background(), dummyDB{}, name); err == nil {
			t.Errorf("Migrate with table %q: no error", name)
		}
	}
	for _, name := range []string{"", "idem_records", "billing.idem_records", "user", "public.select", "_t9", strings.Repeat("t", 48), `"t"`, `"Records"`, `billing."Idem ""Records"""`} {
		if _, err := pgstore.New(dummyDB{}, pgstore.Config{Table: name}); err != nil {
			t.Errorf("New with table %q: %v", name, err)
		}
	}
	if _, err := pgstore.New(nil, pgstore.Config{}); err == nil {
		t.Error("New(nil): no error")
	}
}

// dummyDB is a DB that is never called.
type dummyDB struct{ pgstore.DB }

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 8)
	schema := newSchema(t, pool)
	table := schema + ".user" // a reserved word: the name is quoted
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() { errs <- pgstore.Migrate(testCtx(t), pool, table) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	if err := pgstore.Migrate(testCtx(t), pool, table); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	s, err := pgstore.New(pool, pgstore.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.Claim(testCtx(t), claimArgs("k", "fp")); err != nil || c.Outcome != storage.Acquired {
		t.Fatalf("Claim on the migrated table: %v %v", c.Outcome, err)
	}
}

func TestMissingTableNamesMigrate(t *testing.T) {
	t.Parallel()
	pool := newPool(t, 2)
	schema := newSchema(t, pool)
	s, err := pgstore.New(pool, pgstore.Config{Table: schema + ".never_migrated"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Claim(testCtx(t), claimArgs("k", "fp"))
	if err == nil || !strings.Contains(err.Error(), "pgstore.Migrate") || errors.Is(err, storage.ErrStoreUnavailable) {
		t.Fatalf("Claim on a missing table: %v, want an error that names Migrate and is not ErrStoreUnavailable", err)
	}
}

func claimArgs(key, fp string) storage.ClaimArgs {
	return storage.ClaimArgs{Key: key, Fingerprint: []byte(fp), Lease: time.Minute, Retention: time.Hour}
}

func TestClaimBatchRepeatedKeysInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	ctx := testCtx(t)
	s := e.store

	// "released" has fingerprint A and a released lease: an entry with
	// fingerprint B is refused, the next entry with A takes over, and a
	// third one is Busy behind it.
	c, err := s.Claim(ctx, claimArgs("released", "A"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "released", c.Token); err != nil {
		t.Fatal(err)
	}
	got, err := s.ClaimBatch(ctx, []storage.ClaimArgs{
		claimArgs("fresh", "F"), claimArgs("released", "B"), claimArgs("fresh", "F"),
		claimArgs("released", "A"), claimArgs("fresh", "G"), claimArgs("released", "A"),
	})
	if err != nil {
		t.Fatalf("ClaimBatch: %v", err)
	}
	want := []struct {
		outcome storage.Outcome
		err     error
		attempt int
	}{
		{storage.Acquired, nil, 1}, {0, storage.ErrKeyReused, 0}, {storage.Busy, nil, 1},
		{storage.Acquired, nil, 2}, {0, storage.ErrKeyReused, 0}, {storage.Busy, nil, 2},
	}
	for i, w := range want {
		g := got[i]
		if g.Outcome != w.outcome || !errors.Is(g.Err, w.err) || g.Record.Attempt != w.attempt {
			t.Errorf("entry %d: %v err %v attempt %d; want %v err %v attempt %d", i, g.Outcome, g.Err, g.Record.Attempt, w.outcome, w.err, w.attempt)
		}
	}
	// The first entry of each key holds it; the Busy ones behind it are
	// not handed its token.
	fresh, err := s.Get(ctx, "fresh")
	if err != nil {
		t.Fatal(err)
	}
	released, err := s.Get(ctx, "released")
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Token != got[0].Token || released.Token != got[3].Token || got[3].Token == c.Token {
		t.Errorf("tokens: records hold %d and %d, first entries acquired %d and %d (released %d)",
			fresh.Token, released.Token, got[0].Token, got[3].Token, c.Token)
	}
	if got[2].Record.Token != 0 || got[5].Record.Token != 0 {
		t.Errorf("busy entries carry tokens %d and %d, want none", got[2].Record.Token, got[5].Record.Token)
	}
}

func TestClaimBatchMaxAttemptsPerEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	ctx := testCtx(t)
	for _, k := range []string{"capped", "uncapped"} {
		for range 2 {
			c, err := e.store.Claim(ctx, claimArgs(k, "fp"))
			if err != nil || c.Outcome != storage.Acquired {
				t.Fatalf("Claim: %v %v", c.Outcome, err)
			}
			if err := e.store.Release(ctx, k, c.Token); err != nil {
				t.Fatal(err)
			}
		}
	}
	capped, uncapped := claimArgs("capped", "fp"), claimArgs("uncapped", "fp")
	capped.MaxAttempts, uncapped.MaxAttempts = 2, 3
	got, err := e.store.ClaimBatch(ctx, []storage.ClaimArgs{uncapped, capped})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Outcome != storage.Acquired || got[0].Record.Attempt != 3 {
		t.Errorf("uncapped: %v attempt %d, want Acquired attempt 3", got[0].Outcome, got[0].Record.Attempt)
	}
	if got[1].Outcome != storage.Duplicate || got[1].Record.Status != storage.StatusFailed ||
		!errors.Is(storage.DecodeFailure(got[1].Record.Result), idem.ErrTooManyAttempts) {
		t.Errorf("capped: %v %v %q, want Duplicate Failed(ErrTooManyAttempts)", got[1].Outcome, got[1].Record.Status, got[1].Record.Result)
	}
}

// A batch replaces a record that expired as if it were absent: attempt 1,
// the new fingerprint, a new token that its Complete is fenced by.
func TestClaimBatchReplacesAnExpiredRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	ctx := testCtx(t)
	old, err := e.store.Claim(ctx, claimArgs("old", "A"))
	if err != nil || old.Outcome != storage.Acquired {
		t.Fatalf("Claim: %v %v", old.Outcome, err)
	}
	if err := e.store.Complete(ctx, "old", old.Token, []byte("v"), time.Hour); err != nil {
		t.Fatal(err)
	}
	// Expired a second ago, on the server's clock; the reaper has not run.
	if _, err := e.pool.Exec(ctx, "UPDATE "+e.store.Table()+" SET expires_at = statement_timestamp() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	got, err := e.store.ClaimBatch(ctx, []storage.ClaimArgs{claimArgs("new", "N"), claimArgs("old", "B")})
	if err != nil {
		t.Fatal(err)
	}
	c := got[1]
	if c.Outcome != storage.Acquired || c.Err != nil || c.Record.Attempt != 1 || c.Token == old.Token || c.Token == got[0].Token {
		t.Fatalf("expired key: %v err %v attempt %d token %d (old %d); want Acquired, attempt 1, a new token", c.Outcome, c.Err, c.Record.Attempt, c.Token, old.Token)
	}
	if err := e.store.Complete(ctx, "old", old.Token, []byte("stale"), time.Hour); !errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("Complete with the expired record's token: %v, want ErrLeaseLost", err)
	}
	if err := e.store.Complete(ctx, "old", c.Token, []byte("w"), time.Hour); err != nil {
		t.Fatalf("Complete with the batch's token: %v", err)
	}
	d, err := e.store.Claim(ctx, claimArgs("old", "B"))
	if err != nil || d.Outcome != storage.Duplicate || string(d.Record.Result) != "w" {
		t.Errorf("after: %v %q %v, want Duplicate %q", d.Outcome, d.Record.Result, err, "w")
	}
}

// Each entry of a batch gets its own lease and retention, on the server's
// clock: its lease ends lease after the statement's time, and its record
// expires retention after that. A sub-microsecond lease rounds up.
func TestClaimBatchLeasesAndRetentions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	ctx := testCtx(t)
	args := []storage.ClaimArgs{claimArgs("b", "fp"), claimArgs("a", "fp"), claimArgs("c", "fp")}
	args[0].Lease, args[0].Retention = 90*time.Second, 2*time.Hour
	args[1].Lease, args[1].Retention = 7*time.Second, 30*time.Minute+time.Microsecond
	args[2].Lease, args[2].Retention = 1500*time.Nanosecond, time.Minute
	serverNow := func() time.Time {
		var now time.Time
		if err := e.pool.QueryRow(ctx, "SELECT statement_timestamp()").Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	before := serverNow()
	got, err := e.store.ClaimBatch(ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	after := serverNow()
	for i, a := range args {
		c := got[i]
		if c.Outcome != storage.Acquired {
			t.Fatalf("%s: %v, want Acquired", a.Key, c.Outcome)
		}
		lease := (a.Lease + time.Microsecond - 1).Truncate(time.Microsecond) // rounded up
		if c.Record.LeaseUntil.Before(before.Add(lease)) || c.Record.LeaseUntil.After(after.Add(lease)) {
			t.Errorf("%s: lease until %v, want %v after a time within [%v, %v]", a.Key, c.Record.LeaseUntil, lease, before, after)
		}
		if d := c.Record.ExpiresAt.Sub(c.Record.LeaseUntil); d != a.Retention {
			t.Errorf("%s: expires %v after its lease ends, want the retention %v", a.Key, d, a.Retention)
		}
		r, err := e.store.Get(ctx, a.Key)
		if err != nil || !r.LeaseUntil.Equal(c.Record.LeaseUntil) || !r.ExpiresAt.Equal(c.Record.ExpiresAt) {
			t.Errorf("%s: Get %v, %v; ClaimBatch said lease until %v, expires %v", a.Key, r, err, c.Record.LeaseUntil, c.Record.ExpiresAt)
		}
	}
}

// Batches over the same keys in opposite orders, with completions, lock
// rows in key order: PostgreSQL never finds a deadlock (it would abort a
// statement with SQLSTATE 40P01 after a second).
func TestConcurrentBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 8)
	const n = 40
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for round := range 10 {
				args := make([]storage.ClaimArgs, n)
				for i := range args {
					args[i] = claimArgs(fmt.Sprintf("r%d-k%02d", round, i), "fp")
					args[i].Lease = 5 * time.Millisecond
				}
				if w%2 == 1 {
					slices.Reverse(args)
				}
				got, err := e.store.ClaimBatch(context.Background(), args)
				if err != nil {
					t.Errorf("worker %d: ClaimBatch: %v", w, err)
					return
				}
				var cs []storage.Completion
				for i, c := range got {
					if c.Outcome == storage.Acquired {
						cs = append(cs, storage.Completion{Key: args[i].Key, Token: c.Token, Value: []byte("v"), Retention: time.Hour})
					}
				}
				if w%2 == 0 {
					slices.Reverse(cs)
				}
				if _, err := e.store.CompleteBatch(context.Background(), cs); err != nil {
					t.Errorf("worker %d: CompleteBatch: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestCompleteBatchRepeatedEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	ctx := testCtx(t)
	c, err := e.store.Claim(ctx, claimArgs("k", "fp"))
	if err != nil {
		t.Fatal(err)
	}
	errs, err := e.store.CompleteBatch(ctx, []storage.Completion{
		{Key: "k", Token: c.Token + 1, Value: []byte("wrong token"), Retention: time.Hour},
		{Key: "k", Token: c.Token, Value: []byte("first"), Retention: time.Hour},
		{Key: "k", Token: c.Token, Value: []byte("second"), Retention: time.Hour},
		{Key: "k", Token: 0, Value: []byte("zero"), Retention: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(errs[0], storage.ErrLeaseLost) || errs[1] != nil || !errors.Is(errs[2], storage.ErrLeaseLost) || !errors.Is(errs[3], storage.ErrLeaseLost) {
		t.Fatalf("errors %v, want [ErrLeaseLost nil ErrLeaseLost ErrLeaseLost]", errs)
	}
	if r, err := e.store.Get(ctx, "k"); err != nil || string(r.Result) != "first" {
		t.Fatalf("record %q %v, want the first completion", r.Result, err)
	}
}

// An expired record of any status is replaced as if absent: attempt 1, the
// new fingerprint, a new token.
func TestExpiredRecordIsReplaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	ctx := testCtx(t)
	a := claimArgs("k", "old")
	a.Lease, a.Retention, a.MaxAttempts = time.Millisecond, time.Millisecond, 1
	first, err := e.store.Claim(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the server to see the record expired.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := e.store.Get(ctx, "k"); errors.Is(err, storage.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the record never expired")
		}
		time.Sleep(time.Millisecond)
	}
	b := claimArgs("k", "new")
	b.MaxAttempts = 1 // attempt 1 again, so not capped
	c, err := e.store.Claim(ctx, b)
	if err != nil || c.Outcome != storage.Acquired || c.Record.Attempt != 1 || c.Token == first.Token {
		t.Fatalf("claim of the expired key: %v %+v %v, want Acquired attempt 1 with a new token", c.Outcome, c.Record, err)
	}
	r, err := e.store.Get(ctx, "k")
	if err != nil || !bytes.Equal(r.Fingerprint, []byte("new")) || r.Status != storage.StatusInProgress {
		t.Fatalf("record %+v %v, want the new claim's", r, err)
	}
}

// With a pgx.Tx as its DB, a Store's writes commit or roll back with the
// caller's transaction.
func TestStoreInsideCallerTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	ctx := testCtx(t)
	for _, commit := range []bool{false, true} {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A test that fails inside the transaction must not leave it open:
		// the cleanup that drops the schema would wait for its locks.
		t.Cleanup(func() { tx.Rollback(context.Background()) })
		s, err := pgstore.New(tx, pgstore.Config{Table: e.table})
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.Claim(ctx, claimArgs("k", "fp"))
		if err != nil || c.Outcome != storage.Acquired {
			t.Fatalf("Claim in tx: %v %v", c.Outcome, err)
		}
		if err := s.Complete(ctx, "k", c.Token, []byte("v"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.store.Get(ctx, "k")
		if commit && err != nil || !commit && !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("commit=%v: Get after the transaction: %v", commit, err)
		}
	}
}

// The Guard over a pgstore.Store, end to end.
func TestGuardOverStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	g := idemtest.Guard(t, e.store, idem.Config{Namespace: "orders"})
	runs := 0
	for i := range 3 {
		res, err := g.Do(testCtx(t), "order-1", []byte("pay 10"), func(ctx context.Context) ([]byte, error) {
			runs++
			return []byte("paid"), nil
		})
		if err != nil || string(res.Value) != "paid" || res.Replayed != (i > 0) {
			t.Fatalf("Do %d: %q replayed=%v %v", i, res.Value, res.Replayed, err)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times", runs)
	}
}

// TestOutcomeKeepsTheClaimsExpiry: an outcome stored within the lease with
// the claim's retention keeps the expiry the claim set, so that its UPDATE
// changes no indexed column and is HOT; with another retention the record
// expires that retention from now. The counts come from
// pg_stat_xact_user_tables, which shows the current transaction's own
// updates at once, so the store runs inside one.
func TestOutcomeKeepsTheClaimsExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	ctx := testCtx(t)
	tx, s := e.storeInTx(t)
	updates := func() (all, hot int) {
		t.Helper()
		if err := tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = $1::regclass`,
			e.store.Table()).Scan(&all, &hot); err != nil {
			t.Fatal(err)
		}
		return all, hot
	}
	var now time.Time
	for _, tc := range []struct {
		name                 string
		claimRet, outcomeRet time.Duration
		batch                bool
		kept                 bool
	}{
		{"Complete, the claim's retention", time.Hour, time.Hour, false, true},
		{"CompleteBatch, the claim's retention", time.Hour, time.Hour, true, true},
		{"Complete, a shorter retention", time.Hour, time.Minute, false, false},
		{"Complete, a longer retention", time.Minute, 2 * time.Hour, false, false},
	} {
		a := storage.ClaimArgs{Key: "k " + tc.name, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: tc.claimRet}
		cl, err := s.Claim(ctx, a)
		if err != nil || cl.Outcome != storage.Acquired {
			t.Fatalf("%s: claim: %v %v", tc.name, cl.Outcome, err)
		}
		allBefore, hotBefore := updates()
		if tc.batch {
			var errs []error
			if errs, err = s.CompleteBatch(ctx, []storage.Completion{{Key: a.Key, Token: cl.Token, Value: []byte("v"), Retention: tc.outcomeRet}}); err == nil {
				err = errs[0]
			}
		} else {
			err = s.Complete(ctx, a.Key, cl.Token, []byte("v"), tc.outcomeRet)
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := tx.QueryRow(ctx, "SELECT statement_timestamp()").Scan(&now); err != nil {
			t.Fatal(err)
		}
		r, err := s.Get(ctx, a.Key)
		if err != nil {
			t.Fatal(err)
		}
		all, hot := updates()
		switch {
		case tc.kept && (!r.ExpiresAt.Equal(cl.Record.ExpiresAt) || all-allBefore != 1 || hot-hotBefore != 1):
			t.Errorf("%s: expires %v (claim: %v), %d updates, %d HOT; want the claim's expiry kept, one HOT update",
				tc.name, r.ExpiresAt, cl.Record.ExpiresAt, all-allBefore, hot-hotBefore)
		case !tc.kept && !r.ExpiresAt.Equal(now.Add(tc.outcomeRet)):
			// One transaction: statement_timestamp() moves per statement,
			// so the outcome's "now" is a few µs before ours.
			if d := now.Add(tc.outcomeRet).Sub(r.ExpiresAt); d < 0 || d > time.Second {
				t.Errorf("%s: expires %v, want the retention %v from now (%v)", tc.name, r.ExpiresAt, tc.outcomeRet, now)
			}
		}
	}
}
