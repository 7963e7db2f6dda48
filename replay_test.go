package idem_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// doneStore answers every claim with the same Completed record, allocating
// nothing, so that a test counts the Guard's allocations alone.
type doneStore struct {
	storage.Store
	record storage.Record
}

func (s *doneStore) MaxValueSize() int { return 0 }

func (s *doneStore) Claim(context.Context, storage.ClaimArgs) (storage.Claim, error) {
	return storage.Claim{Outcome: storage.Duplicate, Record: s.record}, nil
}

// TestReplayAllocations counts the allocations of a Do of a completed key:
// a duplicate allocates nothing it does not return, but for the store key
// and fingerprint (one buffer) over a store that may keep them.
func TestReplayAllocations(t *testing.T) {
	ctx := context.Background()
	payload := []byte(`{"amount":1200}`)
	never := func(context.Context) ([]byte, error) { return nil, errors.New("ran on a duplicate") }
	replay := func(g *idem.Guard, scope string) func() {
		return func() {
			res, err := g.DoScoped(ctx, scope, "order-1", payload, never)
			if err != nil || !res.Replayed || string(res.Value) != "receipt" {
				t.Fatalf("replay: %q %v", res.Value, err)
			}
		}
	}
	for _, c := range []struct {
		name  string
		store func(t *testing.T) storage.Store
		cfg   idem.Config
		scope string
		want  float64
	}{
		// The Guard alone: the store key and fingerprint are lent from a pool;
		// the value it returns is the store's.
		{"guard", func(*testing.T) storage.Store {
			return &doneStore{record: storage.Record{Status: storage.StatusCompleted, Result: []byte("receipt")}}
		}, idem.Config{}, "", 1},
		{"guard-scoped", func(*testing.T) storage.Store {
			return &doneStore{record: storage.Record{Status: storage.StatusCompleted, Result: []byte("receipt")}}
		}, idem.Config{}, "tenant-7", 1},
		// memstore copies what it keeps of a claim (as every store must): the
		// Guard lends it store key and fingerprint from a pool, and the one
		// allocation is the copy of the value it returns.
		{"memstore", func(t *testing.T) storage.Store { return newMem(t) }, idem.Config{}, "", 1},
		{"memstore-scoped-custom-fingerprint", func(t *testing.T) storage.Store { return newMem(t) },
			idem.Config{Fingerprint: func(dst, p []byte) []byte { return append(dst, p...) }}, "tenant-7", 1},
		// A cached duplicate: the copy of the value only.
		{"cache", func(t *testing.T) storage.Store { return newMem(t) }, idem.Config{CacheSize: 16}, "", 1},
		{"cache-sharded-scoped", func(t *testing.T) storage.Store { return newMem(t) }, idem.Config{CacheSize: 4096}, "tenant-7", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGuard(t, c.store(t), c.cfg)
			if _, err := g.DoScoped(ctx, c.scope, "order-1", payload, value("receipt")); err != nil {
				t.Fatal(err)
			}
			if got := testing.AllocsPerRun(1000, replay(g, c.scope)); got > c.want {
				t.Fatalf("%v allocations per replay, want %v", got, c.want)
			}
		})
	}
}

// TestCachedReplayKeepsKeysApart fills a sharded cache with scoped keys,
// some longer than the Guard's stack buffer, under the default and a custom
// fingerprint, and checks that every duplicate is answered from the cache
// with its own value, and that another payload, scope or key is never
// answered with it.
func TestCachedReplayKeepsKeysApart(t *testing.T) {
	ctx := context.Background()
	custom := func(dst, payload []byte) []byte { // longer than SHA-256
		sum := sha256.Sum256(payload)
		return append(append(dst, "fp:"...), sum[:]...)
	}
	for name, fp := range map[string]func(dst, payload []byte) []byte{"default": nil, "custom": custom} {
		t.Run(name, func(t *testing.T) {
			h := &hookStore{Store: newMem(t)}
			g := newGuard(t, h, idem.Config{CacheSize: 4096, Fingerprint: fp, MaxKeyLen: 1000})
			type op struct{ scope, key string }
			var ops []op
			for i := range 200 {
				scope := fmt.Sprintf("tenant-%d", i%7)
				key := fmt.Sprintf("order-%d", i)
				if i%10 == 0 {
					scope, key = strings.Repeat("s", idem.MaxScopeLen), strings.Repeat("k", 300)+key
				}
				ops = append(ops, op{scope, key})
				if _, err := g.DoScoped(ctx, scope, key, []byte(key), value(scope+"/"+key)); err != nil {
					t.Fatal(err)
				}
			}
			before := h.claims.Load()
			for _, o := range ops {
				res, err := g.DoScoped(ctx, o.scope, o.key, []byte(o.key), value("ran again"))
				if err != nil || !res.Replayed || string(res.Value) != o.scope+"/"+o.key {
					t.Fatalf("%s/%s: %.40q replayed=%v %v", o.scope, o.key, res.Value, res.Replayed, err)
				}
			}
			if n := h.claims.Load() - before; n != 0 {
				t.Fatalf("%d cached duplicates reached the store", n)
			}
			for _, o := range ops[:20] {
				if _, err := g.DoScoped(ctx, o.scope, o.key, []byte("another payload"), value("x")); !errors.Is(err, idem.ErrKeyReused) {
					t.Fatalf("%s/%s with another payload: %v, want ErrKeyReused", o.scope, o.key, err)
				}
				other := "X" + o.scope[1:]
				res, err := g.DoScoped(ctx, other, o.key, []byte(o.key), value("other scope"))
				if err != nil || res.Replayed {
					t.Fatalf("%s/%s: %q replayed=%v %v, want a run of its own", other, o.key, res.Value, res.Replayed, err)
				}
			}
		})
	}
}

// TestReplayHonoursExpiry checks that a replay, from the store or the
// cache, never outlives the record's retention nor the cache's TTL.
func TestReplayHonoursExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := &hookStore{Store: newMem(t)}
		g := newGuard(t, h, idem.Config{CacheSize: 16, CacheTTL: time.Minute, Retention: 10 * time.Minute})
		runs := 0
		fn := func(context.Context) ([]byte, error) { runs++; return fmt.Appendf(nil, "run %d", runs), nil }
		do := func() idem.Result {
			t.Helper()
			res, err := g.Do(ctx, "k", nil, fn)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		do()
		claims := h.claims.Load()
		if res := do(); !res.Replayed || string(res.Value) != "run 1" || h.claims.Load() != claims {
			t.Fatalf("duplicate: %q replayed=%v, %d claims: want run 1 from the cache", res.Value, res.Replayed, h.claims.Load()-claims)
		}
		time.Sleep(2 * time.Minute) // past the cache TTL, within retention
		if res := do(); !res.Replayed || string(res.Value) != "run 1" || h.claims.Load() != claims+1 {
			t.Fatalf("after the cache TTL: %q replayed=%v, %d claims: want run 1 from the store", res.Value, res.Replayed, h.claims.Load()-claims)
		}
		time.Sleep(10 * time.Minute) // past retention
		if res := do(); res.Replayed || string(res.Value) != "run 2" {
			t.Fatalf("after retention: %q replayed=%v, want a new run", res.Value, res.Replayed)
		}
	})
}

// TestLentKeysStayApart runs Do on many goroutines over memstore, which
// borrows each claim's key and fingerprint from the Guard's pool
// (as every store must), with keys short and long (past the pool's largest
// buffer), new and repeated, with and without the local cache: every call
// gets its own key's value, never another's, and every record is stored
// under its own key.
func TestLentKeysStayApart(t *testing.T) {
	for _, cacheSize := range []int{0, 64} {
		t.Run(fmt.Sprintf("cache-%d", cacheSize), func(t *testing.T) {
			ctx := context.Background()
			store := newMem(t)
			g := newGuard(t, store, idem.Config{CacheSize: cacheSize, MaxKeyLen: 4096, Wait: 10 * time.Second})
			const goroutines, keys = 16, 300
			key := func(i int) string {
				if i%7 == 0 {
					return fmt.Sprintf("%s-%d", strings.Repeat("k", 1200+i), i)
				}
				return fmt.Sprintf("order-%d", i)
			}
			errc := make(chan error, goroutines)
			for w := range goroutines {
				go func() {
					for n := range 2 * keys {
						k := key((n*7 + w*13) % keys)
						res, err := g.Do(ctx, k, []byte("payload of "+k), value("value of "+k))
						if err == nil && string(res.Value) != "value of "+k {
							err = fmt.Errorf("= %.30q", res.Value)
						}
						if err != nil {
							err = fmt.Errorf("Do(%.20q): %.200v", k, err)
						}
						if err != nil {
							errc <- err
							return
						}
					}
					errc <- nil
				}()
			}
			for range goroutines {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			for i := range keys {
				r, err := store.Get(ctx, g.StoreKey(key(i)))
				if err != nil || string(r.Result) != "value of "+key(i) ||
					string(r.Fingerprint) != string(idem.SHA256Fingerprint(nil, []byte("payload of "+key(i)))) {
					t.Fatalf("record of %.20q: %.30q %v", key(i), r.Result, err)
				}
			}
		})
	}
}
