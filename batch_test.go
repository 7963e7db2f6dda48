package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

func TestDoBatchRefusesWithoutRunning(t *testing.T) {
	g, err := idem.New(newMem(t), idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ops := []idem.BatchOp{{Key: "a"}, {Key: "b"}}
	for _, r := range g.DoBatch(context.Background(), ops, nil) {
		if r.Err == nil {
			t.Fatal("DoBatch with a nil fn answered no error")
		}
	}
	if res := g.DoBatch(context.Background(), nil, func(context.Context, int) ([]byte, error) { return nil, nil }); len(res) != 0 {
		t.Fatalf("an empty batch answered %d results", len(res))
	}
	g.Close()
	for _, r := range g.DoBatch(context.Background(), ops, func(context.Context, int) ([]byte, error) {
		t.Fatal("ran after Close")
		return nil, nil
	}) {
		if !errors.Is(r.Err, idem.ErrClosed) {
			t.Fatalf("DoBatch after Close: %v, want ErrClosed", r.Err)
		}
	}
}

func TestDoBatchTokenAndObserver(t *testing.T) {
	var mu sync.Mutex
	seen := map[idem.Op]int{}
	g := newGuard(t, newMem(t), idem.Config{Observer: func(_ context.Context, e idem.Event) {
		mu.Lock()
		seen[e.Op]++
		mu.Unlock()
	}})
	ops := []idem.BatchOp{{Scope: "tenant-1", Key: "a"}, {Scope: "tenant-2", Key: "a"}}
	tokens := map[storage.Token]bool{}
	res := g.DoBatch(context.Background(), ops, func(ctx context.Context, i int) ([]byte, error) {
		tok, ok := idem.TokenFrom(ctx)
		if !ok || tok == 0 || tokens[tok] {
			t.Errorf("operation %d: token %d, %v; want a token of its own", i, tok, ok)
		}
		tokens[tok] = true
		return []byte(ops[i].Scope), nil
	})
	for i, r := range res {
		// The same key in two scopes is two operations.
		if r.Err != nil || r.Replayed || string(r.Value) != ops[i].Scope {
			t.Fatalf("operation %d: %q replayed=%v err=%v", i, r.Value, r.Replayed, r.Err)
		}
	}
	if seen[idem.OpClaim] != 2 || seen[idem.OpRun] != 2 || seen[idem.OpComplete] != 2 {
		t.Fatalf("observer saw %v, want 2 claims, runs and completes", seen)
	}
}

// In a batch of slow operations, values are stored as the batch goes, not
// only at its end: a duplicate elsewhere waits for one operation, not for
// the batch. Fast operations are stored together, in one round trip.
func TestDoBatchStoresSlowValuesEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		cs := &completeCounter{Store: s}
		g, err := idem.New(cs, idem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		ops := []idem.BatchOp{{Key: "fast-1"}, {Key: "fast-2"}, {Key: "slow"}, {Key: "next"}, {Key: "last"}}
		res := g.DoBatch(context.Background(), ops, func(ctx context.Context, i int) ([]byte, error) {
			switch ops[i].Key {
			case "slow":
				time.Sleep(60 * time.Millisecond) // longer than a batch keeps values
			case "next":
				rec, err := s.Get(ctx, g.StoreKey("slow"))
				if err != nil || rec.Status != storage.StatusCompleted {
					return nil, fmt.Errorf("the slow operation's record while the batch goes on: %v, %v; want Completed", rec.Status, err)
				}
			}
			return []byte("v"), nil
		})
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		if n := cs.batches.Load(); n != 3 {
			t.Fatalf("%d CompleteBatch calls, want 3: the two before the slow one while it runs, the slow one, the two after", n)
		}
	})
}

// completeCounter counts the CompleteBatch calls of a memstore.
type completeCounter struct {
	*memstore.Store
	batches atomic.Int32
}

func (c *completeCounter) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	c.batches.Add(1)
	return c.Store.CompleteBatch(ctx, cs)
}

// eachStore answers its batch calls with storage.ClaimEach and
// CompleteEach, as a store without batch calls of its own does.
type eachStore struct{ storage.Store }

func (s eachStore) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	return storage.ClaimEach(ctx, s, args)
}

func (s eachStore) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	return storage.CompleteEach(ctx, s, cs)
}

// DoBatchIndependent goes on past operations that do not finish, and runs the
// operations after them under their first claim: with MaxAttempts 1 a
// second claim would fail them, as DoBatch's release and claim again does.
// Over a store whose batches are one call per key it answers the same.
func TestDoBatchIndependentGoesOnPastFailures(t *testing.T) {
	for name, s := range map[string]storage.Store{"batch calls": newMem(t), "per key": eachStore{newMem(t)}} {
		t.Run(name, func(t *testing.T) {
			g := newGuard(t, s, idem.Config{MaxAttempts: 1})
			held := idemtestHold(t, g, "busy")
			flaky := errors.New("payment provider timed out")
			ops := []idem.BatchOp{{Key: "flaky"}, {Key: "busy"}, {Key: "permanent"}, {Key: "ok"}}
			var ran []string
			res := g.DoBatchIndependent(context.Background(), ops, func(_ context.Context, i int) ([]byte, error) {
				ran = append(ran, ops[i].Key)
				switch ops[i].Key {
				case "flaky":
					return nil, flaky
				case "permanent":
					return nil, idem.Permanent(errors.New("card declined"))
				}
				return []byte("v"), nil
			})
			if !errors.Is(res[0].Err, flaky) || !errors.Is(res[1].Err, idem.ErrInProgress) || !idem.IsPermanent(res[2].Err) ||
				res[3].Err != nil || string(res[3].Value) != "v" {
				t.Fatalf("results %+v; want flaky, busy, permanent, a value", res)
			}
			if fmt.Sprint(ran) != "[flaky permanent ok]" {
				t.Fatalf("ran %v, want [flaky permanent ok]", ran)
			}
			held()
		})
	}
}

// idemtestHold claims key through g on a goroutine of its own and holds it
// until the returned function is called.
func idemtestHold(t *testing.T, g *idem.Guard, key string) (release func()) {
	t.Helper()
	claimed, done, ended := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		g.Do(context.Background(), key, nil, func(context.Context) ([]byte, error) {
			close(claimed)
			<-done
			return []byte("held"), nil
		})
	}()
	<-claimed
	return func() { close(done); <-ended }
}

// A busy key that Config.Wait lets DoBatchIndependent wait for is waited for
// last, once the other operations' values are stored: the batch holds no
// key while it waits, and gets the holder's outcome.
func TestDoBatchIndependentWaitsForBusyKeysLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		g, err := idem.New(s, idem.Config{Wait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		release := idemtestHold(t, g, "busy")
		ops := []idem.BatchOp{{Key: "busy"}, {Key: "after"}}
		done := make(chan []idem.BatchResult)
		go func() {
			done <- g.DoBatchIndependent(context.Background(), ops, func(context.Context, int) ([]byte, error) { return []byte("v"), nil })
		}()
		synctest.Wait() // the batch waits for the holder
		rec, err := s.Get(context.Background(), g.StoreKey("after"))
		if err != nil || rec.Status != storage.StatusCompleted {
			t.Fatalf("the record of the operation after the busy key while the batch waits: %v, %v; want Completed", rec.Status, err)
		}
		release()
		res := <-done
		if res[0].Err != nil || string(res[0].Value) != "held" || !res[0].Replayed || res[1].Err != nil {
			t.Fatalf("results %+v; want the holder's value replayed, then a value", res)
		}
	})
}

// DoBatchIndependent stops where no operation after can run: ctx ended.
func TestDoBatchIndependentStopsWhenContextEnds(t *testing.T) {
	g := newGuard(t, newMem(t), idem.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ops := []idem.BatchOp{{Key: "a"}, {Key: "b"}, {Key: "c"}}
	res := g.DoBatchIndependent(ctx, ops, func(ctx context.Context, i int) ([]byte, error) {
		cancel()
		return nil, ctx.Err()
	})
	if !errors.Is(res[0].Err, context.Canceled) || !errors.Is(res[1].Err, idem.ErrNotRun) || !errors.Is(res[2].Err, idem.ErrNotRun) {
		t.Fatalf("results %+v; want the cancelled operation's error, then ErrNotRun", res)
	}
	for _, k := range []string{"a", "b", "c"} {
		ran := false
		if _, err := g.Do(context.Background(), k, nil, func(context.Context) ([]byte, error) { ran = true; return nil, nil }); err != nil || !ran {
			t.Fatalf("Do(%s) after the batch: ran=%v err=%v; want its key released", k, ran, err)
		}
	}
}

// An operation that runs past the batch's flush time does not keep the
// values of the operations before it unstored: they are stored while it
// runs, so that a crash then would not run them again.
func TestDoBatchStoresValuesWhileAnOperationStalls(t *testing.T) {
	for _, unordered := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			s, err := memstore.New(memstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			g, err := idem.New(s, idem.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			do := g.DoBatch
			if unordered {
				do = g.DoBatchIndependent
			}
			ops := []idem.BatchOp{{Key: "before"}, {Key: "stalls"}}
			res := do(context.Background(), ops, func(ctx context.Context, i int) ([]byte, error) {
				if ops[i].Key == "stalls" {
					time.Sleep(time.Minute)
					rec, err := s.Get(ctx, g.StoreKey("before"))
					if err != nil || rec.Status != storage.StatusCompleted {
						return nil, fmt.Errorf("the record before the stalled operation while it runs: %v, %v; want Completed", rec.Status, err)
					}
				}
				return []byte("v"), nil
			})
			for _, r := range res {
				if r.Err != nil {
					t.Fatalf("unordered=%v: %v", unordered, r.Err)
				}
			}
		})
	}
}

// While a slow operation runs, the values of the operations before it are
// stored once the batch's flush time (50ms) has passed: a crash then would
// not run them again. Each later slow operation flushes again.
func TestDoBatchStoresValuesWhileASlowOperationRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMem(t)
		g := newGuard(t, s, idem.Config{Namespace: "flush", Lease: time.Minute})
		ops := []idem.BatchOp{{Key: "a"}, {Key: "slow-1"}, {Key: "b"}, {Key: "slow-2"}}
		status := func(key string) storage.Status {
			r, err := s.Get(context.Background(), storage.StoreKey("flush", key))
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			return r.Status
		}
		res := g.DoBatch(context.Background(), ops, func(_ context.Context, i int) ([]byte, error) {
			switch ops[i].Key {
			case "slow-1":
				time.Sleep(time.Second)
				if st := status("a"); st != storage.StatusCompleted {
					t.Errorf("a is %v a second into slow-1, want Completed", st)
				}
			case "slow-2":
				time.Sleep(time.Second)
				if st := status("slow-1"); st != storage.StatusCompleted {
					t.Errorf("slow-1 is %v a second into slow-2, want Completed", st)
				}
				if st := status("b"); st != storage.StatusCompleted {
					t.Errorf("b is %v a second into slow-2, want Completed", st)
				}
			}
			return []byte(ops[i].Key), nil
		})
		for i, r := range res {
			if r.Err != nil || string(r.Value) != ops[i].Key {
				t.Errorf("%s: %q, %v", ops[i].Key, r.Value, r.Err)
			}
		}
	})
}
