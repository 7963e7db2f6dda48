package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/coalesce"
	"github.com/idemgo/idem/storage"
)

// refusing is a store that refuses, as a store refuses arguments out of
// its range, every call of a key holding "bad"; a batch holding one is
// refused whole, as redisstore and dynamostore refuse a batch with one
// entry out of range. Everything else is memstore's.
type refusing struct{ storage.Store }

func refusedKey(key string) error {
	if strings.Contains(key, "bad") {
		return fmt.Errorf("refusing: key %q: %w", key, storage.ErrRefused)
	}
	return nil
}

func (r refusing) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if err := refusedKey(a.Key); err != nil {
		return storage.Claim{}, err
	}
	return r.Store.Claim(ctx, a)
}

func (r refusing) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	for _, a := range args {
		if err := refusedKey(a.Key); err != nil {
			return nil, err
		}
	}
	return r.Store.ClaimBatch(ctx, args)
}

// A key the store refuses fails alone, with ErrRefused: it is not an
// outage, and the Guard does not run the operation unguarded for it even
// when it fails open.
func TestRefusedKeyIsNotAnOutage(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailOpen=%v", failOpen), func(t *testing.T) {
			g := newGuard(t, refusing{newMem(t)}, idem.Config{FailOpen: failOpen})
			ran := false
			_, err := g.Do(t.Context(), "bad-order", nil, func(context.Context) ([]byte, error) { ran = true; return nil, nil })
			if !errors.Is(err, idem.ErrRefused) || errors.Is(err, idem.ErrStoreUnavailable) {
				t.Fatalf("Do of a refused key: %v, want ErrRefused and not ErrStoreUnavailable", err)
			}
			if ran {
				t.Fatal("the operation ran for a key the store refused")
			}
		})
	}
}

// One refused key in a batch fails alone: the others run and are stored,
// in DoBatch, which does not stop at it (it is decided), and in
// DoBatchIndependent.
func TestRefusedKeyAloneInBatch(t *testing.T) {
	ops := []idem.BatchOp{{Key: "a"}, {Key: "b"}, {Key: "bad"}, {Key: "c"}, {Key: "d"}}
	for name, do := range map[string]func(*idem.Guard, context.Context, []idem.BatchOp, func(context.Context, int) ([]byte, error)) []idem.BatchResult{
		"DoBatch":            (*idem.Guard).DoBatch,
		"DoBatchIndependent": (*idem.Guard).DoBatchIndependent,
	} {
		t.Run(name, func(t *testing.T) {
			s := newMem(t)
			g := newGuard(t, refusing{s}, idem.Config{})
			var ran atomic.Int32
			res := do(g, t.Context(), ops, func(_ context.Context, i int) ([]byte, error) {
				ran.Add(1)
				return []byte(ops[i].Key), nil
			})
			for i, r := range res {
				switch {
				case ops[i].Key == "bad":
					if !errors.Is(r.Err, idem.ErrRefused) {
						t.Errorf("op %q: %v, want ErrRefused", ops[i].Key, r.Err)
					}
				case r.Err != nil || string(r.Value) != ops[i].Key:
					t.Errorf("op %q: %q, %v; want its value", ops[i].Key, r.Value, r.Err)
				}
			}
			if n := ran.Load(); n != 4 {
				t.Fatalf("fn ran %d times, want 4 (every key but the refused one)", n)
			}
			again := do(g, t.Context(), ops[:2], func(context.Context, int) ([]byte, error) {
				t.Error("fn ran again for a stored key")
				return nil, nil
			})
			for i, r := range again {
				if !r.Replayed || r.Err != nil {
					t.Errorf("op %q again: %+v, want its stored value replayed", ops[i].Key, r)
				}
			}
		})
	}
}

// Through coalesce, the batch a refused key shares with other callers'
// keys is refused whole by the store; each other caller still gets its
// own answer.
func TestRefusedKeyAloneInCoalescedBatch(t *testing.T) {
	g := newGuard(t, coalesce.New(refusing{newMem(t)}), idem.Config{})
	const n = 64
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("order-%d", i)
			if i == n/2 {
				key = "bad-order"
			}
			<-start
			_, errs[i] = g.Do(t.Context(), key, nil, func(context.Context) ([]byte, error) { return []byte("ok"), nil })
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if i == n/2 {
			if !errors.Is(err, idem.ErrRefused) {
				t.Errorf("the refused caller: %v, want ErrRefused", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("caller %d: %v, want no error", i, err)
		}
	}
}
