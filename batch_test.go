package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
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
