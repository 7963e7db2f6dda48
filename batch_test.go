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
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/memstore"
)

// plainStore hides the batch calls of the store under it.
type plainStore struct{ idem.Store }

// claimerStore has ClaimBatch but not CompleteBatch.
type claimerStore struct{ idem.Store }

func (s claimerStore) ClaimBatch(ctx context.Context, args []idem.ClaimArgs) ([]idem.Claim, error) {
	return s.Store.(idem.BatchClaimer).ClaimBatch(ctx, args)
}

// The suite's DoBatch cases over a store without batch calls, and over one
// with ClaimBatch only: DoBatch falls back to per-key calls with the same
// answers. (memstore, with both, runs the suite in idemtest's own tests.)
func TestDoBatchWithoutBatchCalls(t *testing.T) {
	s := newMem(t)
	idemtest.Run(t, func(*testing.T) idem.Store { return plainStore{s} })
}

func TestDoBatchWithClaimBatchOnly(t *testing.T) {
	s := newMem(t)
	idemtest.Run(t, func(*testing.T) idem.Store { return claimerStore{s} })
}

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
	tokens := map[idem.Token]bool{}
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
				if err != nil || rec.Status != idem.StatusCompleted {
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
		if n := cs.batches.Load(); n != 2 {
			t.Fatalf("%d CompleteBatch calls, want 2: the three before the slow one's end, the two after", n)
		}
	})
}

// completeCounter counts the CompleteBatch calls of a memstore.
type completeCounter struct {
	*memstore.Store
	batches atomic.Int32
}

func (c *completeCounter) CompleteBatch(ctx context.Context, cs []idem.Completion) ([]error, error) {
	c.batches.Add(1)
	return c.Store.CompleteBatch(ctx, cs)
}
