package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
)

// replays is how many duplicates each replay test sends.
const replays = 1000

// rowImage returns the row of key as it is stored, with the version it is
// (xmin, ctid): a rewrite of the row with the same values changes them.
func rowImage(t *testing.T, db pgstore.DB, table, key string) string {
	t.Helper()
	var img string
	err := db.QueryRow(context.Background(), `SELECT format('%s xmin=%s ctid=%s', r, r.xmin, r.ctid) FROM `+table+` AS r WHERE key = $1`,
		[]byte(key)).Scan(&img)
	if err != nil {
		t.Fatalf("row of %q: %v", key, err)
	}
	return img
}

// replayFixture is a table holding a record of each kind that a claim
// answers without taking it: completed, failed, in progress under a live
// lease. Each entry of claims is one such claim and what it must answer.
type replayFixture struct {
	keys   []string
	claims []replayClaim
}

type replayClaim struct {
	args    storage.ClaimArgs
	outcome storage.Outcome
	err     error
}

func newReplayFixture(t *testing.T, s *pgstore.Store) replayFixture {
	t.Helper()
	ctx := testCtx(t)
	claim := func(key string) storage.Claim {
		c, err := s.Claim(ctx, claimArgs(key, "fp"))
		if err != nil || c.Outcome != storage.Acquired {
			t.Fatalf("claim %q: %v %v", key, c.Outcome, err)
		}
		return c
	}
	c := claim("completed")
	if err := s.Complete(ctx, "completed", c.Token, []byte("receipt"), time.Hour); err != nil {
		t.Fatal(err)
	}
	c = claim("failed")
	if err := s.Fail(ctx, "failed", c.Token, storage.EncodeFailure(errors.New("declined")), time.Hour); err != nil {
		t.Fatal(err)
	}
	claim("busy")
	return replayFixture{
		keys: []string{"completed", "failed", "busy"},
		claims: []replayClaim{
			{claimArgs("completed", "fp"), storage.Duplicate, nil},
			{claimArgs("failed", "fp"), storage.Duplicate, nil},
			{claimArgs("busy", "fp"), storage.Busy, nil},
			{claimArgs("completed", "another"), 0, storage.ErrKeyReused},
			{claimArgs("busy", "another"), 0, storage.ErrKeyReused},
		},
	}
}

func (f replayFixture) check(t *testing.T, what string, want replayClaim, got storage.Claim, err error) {
	t.Helper()
	if want.err != nil {
		if !errors.Is(err, want.err) {
			t.Fatalf("%s of %q: %v %v, want %v", what, want.args.Key, got.Outcome, err, want.err)
		}
		return
	}
	if err != nil || got.Outcome != want.outcome || got.Token != 0 {
		t.Fatalf("%s of %q: %v token %d %v, want %v without a token", what, want.args.Key, got.Outcome, got.Token, err, want.outcome)
	}
	if want.outcome == storage.Duplicate && got.Record.Status.Done() && len(got.Record.Result) == 0 {
		t.Fatalf("%s of %q: %+v, want the stored result", what, want.args.Key, got.Record)
	}
}

// images returns the row images of the fixture's keys.
func (f replayFixture) images(t *testing.T, e *env) []string {
	var out []string
	for _, k := range f.keys {
		out = append(out, rowImage(t, e.pool, e.store.Table(), k))
	}
	return out
}

// txWrites is what a transaction has done so far: its transaction ID, if
// it has one, and the rows of a table inserted, updated and deleted by the
// session (pg_stat_xact_user_tables, which may include earlier
// transactions of the session whose counts were not flushed yet: compare
// two).
type txWrites struct {
	xid           *string
	ins, upd, del int64
}

func writesOf(t *testing.T, tx pgx.Tx, table string) txWrites {
	t.Helper()
	var w txWrites
	err := tx.QueryRow(context.Background(), `SELECT pg_current_xact_id_if_assigned()::text, n_tup_ins, n_tup_upd, n_tup_del
		FROM pg_stat_xact_user_tables WHERE relid = $1::regclass`, table).Scan(&w.xid, &w.ins, &w.upd, &w.del)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// since describes what the transaction did between w0 and w, or returns ""
// when it has no transaction ID and wrote no row.
func (w txWrites) since(w0 txWrites) string {
	ins, upd, del := w.ins-w0.ins, w.upd-w0.upd, w.del-w0.del
	if w.xid == nil && ins == 0 && upd == 0 && del == 0 {
		return ""
	}
	x := "none"
	if w.xid != nil {
		x = *w.xid
	}
	return fmt.Sprintf("transaction ID %s, %d rows inserted, %d updated, %d deleted", x, ins, upd, del)
}

// TestReplayWritesNothing: claims of a completed, a failed and a busy key,
// and with another fingerprint, by Claim and by ClaimBatch, all inside one
// transaction: after a thousand of them the transaction has no
// transaction ID (it locked or wrote no row: it would have one, and a
// commit record to write) and the rows are the same versions, byte for
// byte.
func TestReplayWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	f := newReplayFixture(t, e.store)
	before := f.images(t, e)
	ctx := testCtx(t)
	tx, s := e.storeInTx(t)
	w0 := writesOf(t, tx, e.store.Table())
	peeking, err := pgstore.New(tx, pgstore.Config{Table: e.table, Peek: pgstore.PeekAlways})
	if err != nil {
		t.Fatal(err)
	}
	for i := range replays {
		want := f.claims[i%len(f.claims)]
		c, err := s.Claim(ctx, want.args)
		f.check(t, "Claim", want, c, err)
		c, err = peeking.Claim(ctx, want.args)
		f.check(t, "Claim after a peek", want, c, err)
	}
	// Batches of every kind, one of them with each key twice (two rounds,
	// pipelined).
	batch := make([]storage.ClaimArgs, 0, 2*len(f.claims))
	for _, c := range f.claims {
		batch = append(batch, c.args)
	}
	for i := 0; i < replays; i += len(batch) {
		got, err := s.ClaimBatch(ctx, batch)
		if err != nil {
			t.Fatalf("ClaimBatch: %v", err)
		}
		for j, want := range f.claims {
			f.check(t, "ClaimBatch", want, got[j], got[j].Err)
		}
	}
	twice := append(batch, batch...)
	got, err := s.ClaimBatch(ctx, twice)
	if err != nil {
		t.Fatalf("ClaimBatch with each key twice: %v", err)
	}
	for j := range twice {
		f.check(t, "ClaimBatch with each key twice", f.claims[j%len(f.claims)], got[j], got[j].Err)
	}
	if w := writesOf(t, tx, e.store.Table()).since(w0); w != "" {
		t.Errorf("after %d replays by Claim and %d by ClaimBatch, the transaction has %s; want none", replays, replays+len(twice), w)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if after := f.images(t, e); !equal(before, after) {
		t.Errorf("the records changed:\nbefore %q\nafter  %q", before, after)
	}
}

func equal(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

// TestTxGuardDuplicateLeavesNothingInTheTransaction: a thousand DoTx of a
// completed key in one transaction of the caller's replay it, and leave
// the transaction without a transaction ID (no write, no row lock) and the
// record's row lockable by anyone else while the transaction is open.
func TestTxGuardDuplicateLeavesNothingInTheTransaction(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t, 4, txConf{TxConfig: pgstore.TxConfig{LockTimeout: time.Second}})
	ctx := testCtx(t)
	first, err := e.g.Do(ctx, "order-1", []byte("pay 10"), e.pay("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	key := storage.StoreKey("payments", "order-1")
	before := rowImage(t, e.pool, e.store.Table(), key)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	w0 := writesOf(t, tx, e.store.Table())
	for range replays {
		res, err := e.g.DoTx(ctx, tx, "order-1", []byte("pay 10"), func(context.Context, pgx.Tx) ([]byte, error) {
			return nil, errors.New("fn ran for a duplicate")
		})
		if err != nil || !res.Replayed || string(res.Value) != string(first.Value) {
			t.Fatalf("DoTx of a completed key: %q replayed=%v %v, want %q replayed", res.Value, res.Replayed, err, first.Value)
		}
	}
	if w := writesOf(t, tx, e.store.Table()).since(w0); w != "" {
		t.Errorf("after %d duplicates by DoTx, the transaction has %s; want none", replays, w)
	}
	var pid int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// While tx is open: it holds no lock on a transaction ID (it has
	// none) and none on the table (the claims' were released with their
	// savepoint), and the row can be locked at once from elsewhere.
	var locks []string
	rows, err := e.pool.Query(ctx, `SELECT l.locktype || ' ' || l.mode || coalesce(' ' || c.relname, '')
		FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation
		WHERE l.pid = $1 AND l.granted AND (l.locktype = 'transactionid' OR l.relation = $2::regclass)`, pid, e.store.Table())
	if err == nil {
		locks, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) > 0 {
		t.Errorf("the caller's transaction holds %v after the duplicates; want no transaction ID and no lock on the records", locks)
	}
	other, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, "SELECT 1 FROM "+e.store.Table()+" WHERE key = $1 FOR UPDATE NOWAIT", []byte(key)); err != nil {
		t.Errorf("locking the record's row while the caller's transaction is open: %v; want it free", err)
	}
	other.Rollback(ctx)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if after := rowImage(t, e.pool, e.store.Table(), key); after != before {
		t.Errorf("the record changed:\nbefore %s\nafter  %s", before, after)
	}
}

// walPerReplay is the most WAL, in bytes per replay, that
// TestReplayWritesNoWAL allows: a replay writes none, but the server's own
// processes may write some meanwhile (autovacuum, a checkpoint). A replay
// that locks or rewrites the row writes a heap record and a commit record:
// the claims that did wrote 287 (Claim), 145 (ClaimBatch), 221 (TxGuard.Do)
// and 267 (DoTx) bytes per replay here.
const walPerReplay = 16

// TestReplayWritesNoWAL counts the WAL bytes of a thousand replays of
// completed keys, each in its own transaction as a caller sends them: by
// Claim, ClaimBatch (batches of 100), TxGuard.Do and TxGuard.DoTx (a
// transaction of the caller's each, committed). The WAL position is the
// server's, so the test runs a throwaway server of its own, which nothing
// else writes to; each case is measured up to three times, and passes
// when one measure is within walPerReplay.
func TestReplayWritesNoWAL(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := testCtx(t)
	pool, err := pgxpool.New(ctx, srv.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgstore.Migrate(ctx, pool, ""); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := pgstore.NewTxGuard(pool, idem.Config{Namespace: "payments"}, pgstore.TxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	peeking, err := pgstore.New(pool, pgstore.Config{Peek: pgstore.PeekAlways})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 100)
	batch := make([]storage.ClaimArgs, len(keys))
	for i := range keys {
		keys[i] = fmt.Sprint("order-", i)
		if _, err := g.Do(ctx, keys[i], []byte("pay"), func(context.Context, pgx.Tx) ([]byte, error) { return []byte("receipt"), nil }); err != nil {
			t.Fatal(err)
		}
		batch[i] = storage.ClaimArgs{Key: storage.StoreKey("payments", keys[i]), Fingerprint: idem.SHA256Fingerprint(nil, []byte("pay")),
			Lease: time.Minute, Retention: time.Hour}
	}
	noFn := func(context.Context, pgx.Tx) ([]byte, error) { return nil, errors.New("fn ran for a duplicate") }
	replayed := func(res idem.Result, err error) error {
		if err == nil && !res.Replayed {
			err = errors.New("not replayed")
		}
		return err
	}
	for _, tc := range []struct {
		name   string
		per    int // replays per call
		replay func(i int) error
	}{
		{"Claim", 1, func(i int) error {
			c, err := s.Claim(ctx, batch[i%len(batch)]) // peeks once the replays lead
			if err == nil && c.Outcome != storage.Duplicate {
				err = fmt.Errorf("outcome %v", c.Outcome)
			}
			return err
		}},
		{"Claim after a peek", 1, func(i int) error {
			c, err := peeking.Claim(ctx, batch[i%len(batch)])
			if err == nil && c.Outcome != storage.Duplicate {
				err = fmt.Errorf("outcome %v", c.Outcome)
			}
			return err
		}},
		{"ClaimBatch", len(batch), func(int) error {
			got, err := s.ClaimBatch(ctx, batch)
			for _, c := range got {
				if err == nil && c.Outcome != storage.Duplicate {
					err = fmt.Errorf("outcome %v", c.Outcome)
				}
			}
			return err
		}},
		{"TxGuard.Do", 1, func(i int) error {
			return replayed(g.Do(ctx, keys[i%len(keys)], []byte("pay"), noFn))
		}},
		{"TxGuard.DoTx", 1, func(i int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return replayed(g.DoTx(ctx, tx, keys[i%len(keys)], []byte("pay"), noFn))
			})
		}},
	} {
		var measured []int64
		for range 3 {
			var start, end string
			if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&start); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < replays; i += tc.per {
				if err := tc.replay(i); err != nil {
					t.Fatalf("%s of a completed key: %v", tc.name, err)
				}
			}
			var bytes int64
			err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text, pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint", start).
				Scan(&end, &bytes)
			if err != nil {
				t.Fatal(err)
			}
			measured = append(measured, bytes)
			if bytes <= walPerReplay*replays {
				break
			}
		}
		best := measured[len(measured)-1]
		t.Logf("%s: %d replays, WAL bytes %v (%.1f per replay in the last measure)", tc.name, replays, measured, float64(best)/replays)
		if best > walPerReplay*replays {
			t.Errorf("%s: %d replays of completed keys wrote %v bytes of WAL in %d measures; want at most %d bytes per replay",
				tc.name, replays, measured, len(measured), walPerReplay)
		}
	}
}

// TestTakeoverAndCapStillWrite: the claims that must write still do, and
// fence: a takeover of a lease that ran out gets a new token and the old
// holder's outcome is refused; past the attempt cap the record becomes
// Failed(ErrTooManyAttempts) and the holder's outcome is refused; an
// expired record is claimed anew. The lease and expiry are moved into the
// past by SQL, so that no test waits on the clock. By Claim and by
// ClaimBatch.
func TestTakeoverAndCapStillWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	ctx := testCtx(t)
	s := e.store
	claims := map[string]func(storage.ClaimArgs) (storage.Claim, error){
		"Claim": func(a storage.ClaimArgs) (storage.Claim, error) { return s.Claim(ctx, a) },
		"ClaimBatch": func(a storage.ClaimArgs) (storage.Claim, error) {
			got, err := s.ClaimBatch(ctx, []storage.ClaimArgs{a})
			if err != nil {
				return storage.Claim{}, err
			}
			return got[0], got[0].Err
		},
	}
	past := func(key, column string) {
		t.Helper()
		if _, err := e.pool.Exec(ctx, "UPDATE "+s.Table()+" SET "+column+" = statement_timestamp() - interval '1 second' WHERE key = $1", []byte(key)); err != nil {
			t.Fatal(err)
		}
	}
	for name, claim := range claims {
		key := "k-" + name
		a := claimArgs(key, "fp")
		a.MaxAttempts = 2
		first, err := claim(a)
		if err != nil || first.Outcome != storage.Acquired || first.Record.Attempt != 1 {
			t.Fatalf("%s: first claim: %v %+v %v", name, first.Outcome, first.Record, err)
		}
		if c, err := claim(a); err != nil || c.Outcome != storage.Busy {
			t.Fatalf("%s: claim under the live lease: %v %v, want Busy", name, c.Outcome, err)
		}
		past(key, "lease_until")
		second, err := claim(a)
		if err != nil || second.Outcome != storage.Acquired || second.Record.Attempt != 2 || second.Token == first.Token {
			t.Fatalf("%s: claim after the lease ran out: %v %+v %v, want Acquired, attempt 2, a new token", name, second.Outcome, second.Record, err)
		}
		if err := s.Complete(ctx, key, first.Token, []byte("late"), time.Hour); !errors.Is(err, storage.ErrLeaseLost) {
			t.Fatalf("%s: the first holder's Complete after the takeover: %v, want ErrLeaseLost", name, err)
		}
		past(key, "lease_until")
		capped, err := claim(a)
		if err != nil || capped.Outcome != storage.Duplicate || capped.Record.Status != storage.StatusFailed {
			t.Fatalf("%s: claim past the cap: %v %+v %v, want a Failed duplicate", name, capped.Outcome, capped.Record, err)
		}
		if err := storage.DecodeFailure(capped.Record.Result); capped.Record.Status != storage.StatusFailed || !errors.Is(err, idem.ErrTooManyAttempts) {
			t.Fatalf("%s: the capped record replays %v, want ErrTooManyAttempts", name, err)
		}
		if err := s.Complete(ctx, key, second.Token, []byte("late"), time.Hour); !errors.Is(err, storage.ErrLeaseLost) {
			t.Fatalf("%s: the second holder's Complete after the cap: %v, want ErrLeaseLost", name, err)
		}
		if r, err := s.Get(ctx, key); err != nil || r.Status != storage.StatusFailed || r.Token != 0 {
			t.Fatalf("%s: record after the cap: %+v %v, want Failed with no token", name, r, err)
		}
		past(key, "expires_at")
		b := claimArgs(key, "another")
		anew, err := claim(b)
		if err != nil || anew.Outcome != storage.Acquired || anew.Record.Attempt != 1 || anew.Token == second.Token {
			t.Fatalf("%s: claim of the expired record: %v %+v %v, want Acquired, attempt 1, a new token", name, anew.Outcome, anew.Record, err)
		}
		if err := s.Complete(ctx, key, anew.Token, []byte("v"), time.Hour); err != nil {
			t.Fatalf("%s: Complete by the new holder: %v", name, err)
		}
	}
}

// TestClaimersRacingOnOneKey: many goroutines claim the same key at once,
// by Claim and by ClaimBatch, on fewer connections than goroutines: exactly
// one acquires it, every other one gets Busy. The keys are new, then
// released (the takeover race), then expired. A claim that loses a race
// between its read and its write reads again; the second run lets the
// full claim answer at once instead (so it does not run in parallel).
func TestClaimersRacingOnOneKey(t *testing.T) {
	t.Run("reads again", func(t *testing.T) { testClaimersRacingOnOneKey(t, pgstore.PeekNever) })
	t.Run("full claim", func(t *testing.T) {
		pgstore.SetReadFirstTries(t, 1)
		testClaimersRacingOnOneKey(t, pgstore.PeekNever)
	})
	t.Run("peeks first", func(t *testing.T) { testClaimersRacingOnOneKey(t, pgstore.PeekAlways) })
}

func testClaimersRacingOnOneKey(t *testing.T, peek pgstore.Peek) {
	const goroutines, rounds = 32, 10
	e := newEnv(t, 8)
	ctx := testCtx(t)
	s, err := pgstore.New(e.pool, pgstore.Config{Table: e.table, Peek: peek})
	if err != nil {
		t.Fatal(err)
	}
	race := func(key string) (acquired []storage.Claim) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range goroutines {
			wg.Go(func() {
				<-start
				var c storage.Claim
				var err error
				if i%2 == 0 {
					c, err = s.Claim(ctx, claimArgs(key, "fp"))
				} else {
					var got []storage.Claim
					if got, err = s.ClaimBatch(ctx, []storage.ClaimArgs{claimArgs(key, "fp")}); err == nil {
						c, err = got[0], got[0].Err
					}
				}
				switch {
				case err != nil:
					t.Errorf("claim of %q: %v", key, err)
				case c.Outcome == storage.Acquired:
					mu.Lock()
					acquired = append(acquired, c)
					mu.Unlock()
				case c.Outcome != storage.Busy:
					t.Errorf("claim of %q: %v, want Acquired or Busy", key, c.Outcome)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(acquired) != 1 {
			t.Fatalf("%d goroutines claimed %q: %d acquired it, want 1", goroutines, key, len(acquired))
		}
		return acquired
	}
	for i := range rounds {
		key := fmt.Sprint("k", i)
		c := race(key)[0]
		if err := s.Release(ctx, key, c.Token); err != nil {
			t.Fatal(err)
		}
		c = race(key)[0]
		if c.Record.Attempt != 2 {
			t.Fatalf("takeover race on %q: attempt %d, want 2", key, c.Record.Attempt)
		}
		if _, err := e.pool.Exec(ctx, "UPDATE "+s.Table()+" SET expires_at = statement_timestamp() - interval '1 second' WHERE key = $1", []byte(key)); err != nil {
			t.Fatal(err)
		}
		if c = race(key)[0]; c.Record.Attempt != 1 {
			t.Fatalf("race on the expired %q: attempt %d, want 1", key, c.Record.Attempt)
		}
	}
}

// TestTxGuardDuplicatesWaitingForTheHolder: duplicates that arrive while
// the holder's transaction is open wait for it, and replay its outcome
// once it commits, both when they read again and when the full claim
// answers them (so it does not run in parallel).
func TestTxGuardDuplicatesWaitingForTheHolder(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprint("full claim ", full), func(t *testing.T) {
			if full {
				pgstore.SetReadFirstTries(t, 1)
			}
			const n = 8
			e := newTxEnv(t, n, txConf{TxConfig: pgstore.TxConfig{LockTimeout: 20 * time.Second}})
			monitor := newPool(t, 1)
			var mu sync.Mutex
			runs, fresh := 0, 0
			values := map[string]int{}
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					res, err := e.g.Do(context.Background(), "order-1", []byte("pay 10"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
						mu.Lock()
						runs++
						mu.Unlock()
						awaitLockWaiters(t, monitor, e.store.Table(), n-1)
						return e.pay("order-1")(ctx, tx)
					})
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						t.Errorf("Do: %v", err)
						return
					}
					if !res.Replayed {
						fresh++
					}
					values[string(res.Value)]++
				})
			}
			wg.Wait()
			if runs != 1 || fresh != 1 || len(values) != 1 || e.ledgerRows(t, "order-1") != 1 {
				t.Fatalf("%d concurrent Do: fn ran %d times, %d fresh results, values %v; want one run, one receipt for all", n, runs, fresh, values)
			}
		})
	}
}
