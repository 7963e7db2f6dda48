package idemtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// The cases of Guard.DoBatch, run by Run with the others: every store runs
// them, over its batch calls where it has them and over per-key calls where
// it has not.
func init() {
	cases = append(cases, []suiteCase{
		{"DoBatchUsesOneRoundTripEach", doBatchRoundTrips},
		{"DoBatchRunsOnceUnderConcurrency", doBatchRunsOnce},
		{"DoBatchSameKeyTwiceRunsOnce", doBatchSameKeyTwice},
		{"DoBatchReplaysStoredOutcomes", doBatchReplays},
		{"DoBatchStopsAtUnfinishedOperation", doBatchStops},
		{"DoBatchStopsAtBusyKey", doBatchBusy},
		{"DoBatchPanicStoresRanReleasesRest", doBatchPanic},
		{"DoBatchHeartbeatHoldsWaitingKeys", doBatchHeartbeat},
		{"DoBatchStaleHolderIsFenced", doBatchFenced},
	}...)
}

// spy counts the calls a Guard makes to its store and can refuse Extend.
type spy struct {
	storage.Store
	claims, completes, claimBatches, completeBatches atomic.Int32
	refuseExtend                                     atomic.Bool
}

func (s *spy) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, a)
}

func (s *spy) Complete(ctx context.Context, key string, t storage.Token, v []byte, r time.Duration) error {
	s.completes.Add(1)
	return s.Store.Complete(ctx, key, t, v, r)
}

func (s *spy) Extend(ctx context.Context, key string, t storage.Token, d time.Duration) error {
	if s.refuseExtend.Load() {
		return errors.New("idemtest: Extend refused")
	}
	return s.Store.Extend(ctx, key, t, d)
}

func (s *spy) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	s.claimBatches.Add(1)
	return s.Store.ClaimBatch(ctx, args)
}

func (s *spy) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	s.completeBatches.Add(1)
	return s.Store.CompleteBatch(ctx, cs)
}

// spied returns a spy over the case's store, twice: as the spy and as the
// store to give a Guard.
func (e *env) spied() (*spy, storage.Store) {
	s := &spy{Store: e.s}
	return s, s
}

func (e *env) guard(s storage.Store, cfg idem.Config) *idem.Guard {
	e.t.Helper()
	cfg.Namespace = e.ns
	g, err := idem.New(s, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { g.Close() })
	return g
}

func ops(keys ...string) []idem.BatchOp {
	out := make([]idem.BatchOp, len(keys))
	for i, k := range keys {
		out[i] = idem.BatchOp{Key: k, Payload: []byte("payload of " + k)}
	}
	return out
}

// valueOf is the value the cases' operations return for a key.
func valueOf(k string) []byte { return []byte("value of " + k) }

// counter runs operations that return valueOf their key, counting runs by key.
type counter struct {
	ops  []idem.BatchOp
	mu   sync.Mutex
	runs map[string]int
}

func (c *counter) fn(_ context.Context, i int) ([]byte, error) {
	c.mu.Lock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[c.ops[i].Key]++
	c.mu.Unlock()
	return valueOf(c.ops[i].Key), nil
}

func (c *counter) count(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[k]
}

// wantResult fails unless r is k's value, fresh or replayed as wanted.
func wantResult(t *testing.T, k string, r idem.BatchResult, replayed bool) {
	t.Helper()
	if r.Err != nil || string(r.Value) != string(valueOf(k)) || r.Replayed != replayed {
		t.Fatalf("%s: result %q replayed=%v err=%v, want %q replayed=%v", k, r.Value, r.Replayed, r.Err, valueOf(k), replayed)
	}
}

// wantRuns fails unless the key's operation now runs on a Do, its key
// having been released (want true) or has an outcome (want false).
func (e *env) wantRunsAgain(g *idem.Guard, k string, want bool) {
	e.t.Helper()
	ran := false
	_, err := g.Do(ctx(e.t), k, []byte("payload of "+k), func(context.Context) ([]byte, error) {
		ran = true
		return valueOf(k), nil
	})
	if ran != want || (err != nil && !idem.IsPermanent(err)) {
		e.t.Fatalf("Do(%s) after the batch: ran=%v err=%v, want ran=%v", k, ran, err, want)
	}
}

func doBatchRoundTrips(t *testing.T, e *env) {
	sp, s := e.spied()
	g := e.guard(s, idem.Config{})
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	c := &counter{ops: ops(keys...)}
	res := g.DoBatch(ctx(t), c.ops, c.fn)
	for i, k := range keys {
		wantResult(t, k, res[i], false)
	}
	// ClaimBatch, CompleteBatch, Claim and Complete calls wanted.
	want := [4]int32{1, 1, 0, 0}
	got := [4]int32{sp.claimBatches.Load(), sp.completeBatches.Load(), sp.claims.Load(), sp.completes.Load()}
	if want[1] == 1 && got[1] > 1 {
		// A batch that ran past 50ms (a loaded machine) stores its values
		// as it goes: still no per-key call.
		want[1] = got[1]
	}
	if got != want {
		t.Fatalf("a batch of %d new keys made %v ClaimBatch, CompleteBatch, Claim and Complete calls; want %v", len(keys), got, want)
	}
	// Again: every key is a duplicate, answered by the one claim round trip.
	before := sp.claimBatches.Load()
	res = g.DoBatch(ctx(t), c.ops, c.fn)
	for i, k := range keys {
		wantResult(t, k, res[i], true)
		if n := c.count(k); n != 1 {
			t.Fatalf("%s ran %d times, want 1", k, n)
		}
	}
	if want[0] == 1 && sp.claimBatches.Load() != before+1 {
		t.Fatalf("a batch of duplicates made %d ClaimBatch calls, want 1", sp.claimBatches.Load()-before)
	}
}

func doBatchRunsOnce(t *testing.T, e *env) {
	const workers, n = 8, 32
	_, s := e.spied()
	// A lease well beyond a batch claim's round trip on a slow store
	// (dynamostore's ClaimBatch writes each key) under the race detector.
	g := e.guard(s, idem.Config{Lease: 10 * time.Second, Wait: 20 * time.Second})
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	c := &counter{ops: ops(keys...)}
	var fresh atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			// Each worker sends the keys from another starting point, so
			// batches overlap in every way.
			mine := make([]idem.BatchOp, n)
			idx := make([]int, n)
			for j := range mine {
				idx[j] = (j + w*n/workers) % n
				mine[j] = c.ops[idx[j]]
			}
			res := g.DoBatch(context.Background(), mine, func(ctx context.Context, j int) ([]byte, error) {
				time.Sleep(time.Millisecond) // hold the key while the others arrive
				return c.fn(ctx, idx[j])
			})
			for j, r := range res {
				if r.Err != nil || string(r.Value) != string(valueOf(mine[j].Key)) {
					t.Errorf("worker %d, %s: %q, %v", w, mine[j].Key, r.Value, r.Err)
					continue
				}
				if !r.Replayed {
					fresh.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for _, k := range keys {
		if runs := c.count(k); runs != 1 {
			t.Errorf("%s ran %d times in %d concurrent batches, want 1", k, runs, workers)
		}
	}
	if fresh.Load() != n {
		t.Fatalf("%d fresh results for %d keys, want one each", fresh.Load(), n)
	}
}

func doBatchSameKeyTwice(t *testing.T, e *env) {
	_, s := e.spied()
	g := e.guard(s, idem.Config{})
	c := &counter{ops: ops("a", "b", "a")}
	res := g.DoBatch(ctx(t), c.ops, c.fn)
	wantResult(t, "a", res[0], false)
	wantResult(t, "b", res[1], false)
	wantResult(t, "a", res[2], true)
	if c.count("a") != 1 {
		t.Fatalf("a ran %d times, want 1", c.count("a"))
	}
	// The same key with another payload in one batch is a reuse.
	reuse := []idem.BatchOp{{Key: "x", Payload: []byte("1")}, {Key: "x", Payload: []byte("2")}}
	res = g.DoBatch(ctx(t), reuse, func(context.Context, int) ([]byte, error) { return []byte("v"), nil })
	if res[0].Err != nil || !errors.Is(res[1].Err, idem.ErrKeyReused) {
		t.Fatalf("x twice with two payloads: %v, %v; want nil, ErrKeyReused", res[0].Err, res[1].Err)
	}
}

func doBatchReplays(t *testing.T, e *env) {
	_, s := e.spied()
	g := e.guard(s, idem.Config{})
	if _, err := g.Do(ctx(t), "done", []byte("payload of done"), func(context.Context) ([]byte, error) { return valueOf("done"), nil }); err != nil {
		t.Fatal(err)
	}
	declined := errors.New("card declined")
	if _, err := g.Do(ctx(t), "failed", []byte("payload of failed"), func(context.Context) ([]byte, error) { return nil, idem.Permanent(declined) }); !errors.Is(err, declined) {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx(t), "reused", []byte("another payload"), func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	c := &counter{ops: append(ops("done", "failed", "reused", "new"), idem.BatchOp{Key: "", Payload: nil})}
	res := g.DoBatch(ctx(t), c.ops, c.fn)
	wantResult(t, "done", res[0], true)
	if pe, ok := errors.AsType[*idem.PermanentError](res[1].Err); !ok || !pe.Replayed || pe.Error() != declined.Error() {
		t.Fatalf("failed: %v, want the stored permanent error replayed", res[1].Err)
	}
	wantErr(t, "reused key", res[2].Err, idem.ErrKeyReused)
	wantResult(t, "new", res[3], false) // the batch went on past them all
	wantErr(t, "empty key", res[4].Err, idem.ErrInvalidKey)
	if c.count("done")+c.count("failed")+c.count("reused") != 0 {
		t.Fatalf("operations with outcomes ran again: %v", c.runs)
	}
}

func doBatchStops(t *testing.T, e *env) {
	_, s := e.spied()
	g := e.guard(s, idem.Config{})
	flaky := errors.New("payment provider timed out")
	declined := errors.New("card declined")
	c := &counter{ops: ops("ok", "permanent", "flaky", "after", "after2")}
	res := g.DoBatch(ctx(t), c.ops, func(ctx context.Context, i int) ([]byte, error) {
		switch c.ops[i].Key {
		case "permanent":
			return nil, idem.Permanent(declined)
		case "flaky":
			return nil, flaky
		}
		return c.fn(ctx, i)
	})
	wantResult(t, "ok", res[0], false)
	if !errors.Is(res[1].Err, declined) || !idem.IsPermanent(res[1].Err) {
		t.Fatalf("permanent: %v, want the permanent error", res[1].Err)
	}
	wantErr(t, "flaky", res[2].Err, flaky)
	wantErr(t, "after", res[3].Err, idem.ErrNotRun)
	wantErr(t, "after2", res[4].Err, idem.ErrNotRun)
	if c.count("after")+c.count("after2") != 0 {
		t.Fatal("operations after the unfinished one ran")
	}
	e.wantRunsAgain(g, "ok", false)
	e.wantRunsAgain(g, "permanent", false)
	e.wantRunsAgain(g, "flaky", true) // released at once: no lease to wait for
	e.wantRunsAgain(g, "after", true)
	e.wantRunsAgain(g, "after2", true)
}

func doBatchBusy(t *testing.T, e *env) {
	_, s := e.spied()
	g := e.guard(s, idem.Config{})
	holder := e.mustClaim(storage.ClaimArgs{
		Key:         storage.StoreKey(e.ns, "held"),
		Fingerprint: idem.SHA256Fingerprint(nil, []byte("payload of held")),
		Lease:       time.Minute, Retention: time.Minute,
	}, storage.Acquired)
	c := &counter{ops: ops("first", "held", "last")}
	res := g.DoBatch(ctx(t), c.ops, c.fn)
	wantResult(t, "first", res[0], false)
	wantErr(t, "held", res[1].Err, idem.ErrInProgress)
	wantErr(t, "last", res[2].Err, idem.ErrNotRun)
	if r := e.get("held"); r.Token != holder.Token || r.Status != storage.StatusInProgress {
		t.Fatalf("the held key's record changed: %+v", r)
	}
	e.wantRunsAgain(g, "last", true)

	// With Wait, the batch waits for the holder's outcome and replays it.
	gw := e.guard(s, idem.Config{Wait: 20 * time.Second})
	go func() {
		time.Sleep(Lease)
		e.s.Complete(context.Background(), storage.StoreKey(e.ns, "held"), holder.Token, valueOf("held"), time.Minute)
	}()
	c = &counter{ops: ops("held", "next")}
	res = gw.DoBatch(ctx(t), c.ops, c.fn)
	wantResult(t, "held", res[0], true)
	wantResult(t, "next", res[1], false)
}

func doBatchPanic(t *testing.T, e *env) {
	_, s := e.spied()
	g := e.guard(s, idem.Config{Lease: time.Minute})
	c := &counter{ops: ops("ran", "panics", "later")}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the operation's panic", r)
			}
		}()
		g.DoBatch(ctx(t), c.ops, func(ctx context.Context, i int) ([]byte, error) {
			if c.ops[i].Key == "panics" {
				panic("boom")
			}
			return c.fn(ctx, i)
		})
	}()
	// Released, although the lease is a minute: a retry runs at once.
	e.wantRunsAgain(g, "ran", false)
	e.wantRunsAgain(g, "panics", true)
	e.wantRunsAgain(g, "later", true)
}

func doBatchHeartbeat(t *testing.T, e *env) {
	_, s := e.spied()
	// A lease of 40 of the suite's: a slow store's Extend (dynalite under
	// the race detector, beside the suite's other cases) stays well within
	// it.
	const lease = 40 * Lease
	g := e.guard(s, idem.Config{Lease: lease})
	c := &counter{ops: ops("slow", "waiting")}
	res := g.DoBatch(ctx(t), c.ops, func(ctx context.Context, i int) ([]byte, error) {
		if i == 0 {
			// Hold the batch past the end of its first lease. The second
			// key's claim is held meanwhile: another claimer finds it busy.
			deadline := time.Now().Add(lease * 3 / 2)
			for time.Now().Before(deadline) {
				time.Sleep(lease / 4)
				a := storage.ClaimArgs{Key: storage.StoreKey(e.ns, "waiting"), Fingerprint: idem.SHA256Fingerprint(nil, []byte("payload of waiting")), Lease: Lease, Retention: time.Minute}
				if cl := e.mustClaim(a, storage.Busy); cl.Record.Attempt != 1 {
					t.Errorf("waiting key: attempt %d, want 1", cl.Record.Attempt)
				}
			}
		}
		return c.fn(ctx, i)
	})
	wantResult(t, "slow", res[0], false)
	wantResult(t, "waiting", res[1], false)
}

func doBatchFenced(t *testing.T, e *env) {
	sp, s := e.spied()
	// A lease of 40 of the suite's: the claim's round trip on a slow store
	// must leave fn a lease to lose, else fn never runs and the case shows
	// nothing.
	g := e.guard(s, idem.Config{Lease: 40 * Lease})
	sp.refuseExtend.Store(true) // the holder is cut off from the store
	other := e.guard(e.s, idem.Config{})
	c := &counter{ops: ops("k")}
	var otherErr error
	ran := false
	res := g.DoBatch(ctx(t), c.ops, func(ctx context.Context, i int) ([]byte, error) {
		ran = true
		<-ctx.Done() // the heartbeat could not confirm the lease: fn is told
		if !errors.Is(context.Cause(ctx), idem.ErrLeaseLost) {
			t.Errorf("fn's context ended with %v, want ErrLeaseLost", context.Cause(ctx))
		}
		// Another holder takes the key over and stores its outcome while
		// this one goes on regardless.
		deadline := time.Now().Add(AwaitTimeout)
		for {
			_, otherErr = other.Do(context.Background(), "k", []byte("payload of k"), func(context.Context) ([]byte, error) { return []byte("other's"), nil })
			if !errors.Is(otherErr, idem.ErrInProgress) || time.Now().After(deadline) {
				break
			}
			time.Sleep(Lease / 5)
		}
		return []byte("stale"), nil
	})
	if !ran {
		t.Fatalf("fn never ran (%v): the lease ended before the claim's answer came", res[0].Err)
	}
	if otherErr != nil {
		t.Fatalf("the other holder: %v", otherErr)
	}
	wantErr(t, "stale holder's result", res[0].Err, idem.ErrLeaseLost)
	if r := e.get("k"); r.Status != storage.StatusCompleted || string(r.Result) != "other's" {
		t.Fatalf("record %v %q, want the other holder's value", r.Status, r.Result)
	}
}
