package idem_test

import (
	"context"
	"crypto/sha256"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

var (
	benchPayload = []byte(`{"order":"o-123456","amount":1200,"currency":"EUR","customer":"c-98"}`)
	benchValue   = []byte("receipt-0001")
	benchKeys    atomic.Int64
)

// keys returns n distinct keys, made before the timer starts so that key
// formatting is not measured.
func keys(n int) []string {
	base := benchKeys.Add(int64(n)) - int64(n)
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "order-" + strconv.FormatInt(base+int64(i), 10)
	}
	return ks
}

func benchCharge(context.Context) ([]byte, error) { return benchValue, nil }

// parallelism makes RunParallel use 16 goroutines on a 2-core machine
// (8 per GOMAXPROCS), the concurrency of a busy consumer.
const parallelism = 8

// BenchmarkDo measures Guard.Do on memstore: a first delivery (claim, run,
// complete) and a duplicate (one claim answered with the stored value, or
// the local cache's), on one goroutine and on 8×GOMAXPROCS goroutines.
func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	b.Run("new-key", func(b *testing.B) {
		g := newGuard(b, newMem(b), idem.Config{})
		ks := keys(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := g.Do(ctx, ks[i], benchPayload, benchCharge); err != nil {
				b.Fatal(err)
			}
		}
	})
	duplicate := func(cfg idem.Config) func(b *testing.B) {
		return func(b *testing.B) {
			g := newGuard(b, newMem(b), cfg)
			g.Do(ctx, "order-dup", benchPayload, benchCharge)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if res, err := g.Do(ctx, "order-dup", benchPayload, benchCharge); err != nil || !res.Replayed {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("duplicate", duplicate(idem.Config{}))
	b.Run("duplicate-cached", duplicate(idem.Config{CacheSize: 16}))
	b.Run("new-key-parallel", func(b *testing.B) {
		g := newGuard(b, newMem(b), idem.Config{})
		ks := keys(b.N)
		runParallel(b, func(i int64) {
			if _, err := g.Do(ctx, ks[i], benchPayload, benchCharge); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("duplicate-parallel", func(b *testing.B) {
		g := newGuard(b, newMem(b), idem.Config{})
		ks := keys(1024)
		for _, k := range ks {
			g.Do(ctx, k, benchPayload, benchCharge)
		}
		runParallel(b, func(i int64) {
			if res, err := g.Do(ctx, ks[i%1024], benchPayload, benchCharge); err != nil || !res.Replayed {
				b.Fatal(err)
			}
		})
	})
}

// runParallel reports allocations and runs op b.N times on parallelism
// goroutines per GOMAXPROCS, i counting the calls from 0 across them.
func runParallel(b *testing.B, op func(i int64)) {
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			op(next.Add(1) - 1)
		}
	})
}

// BenchmarkSyncMap is the in-process ceiling BenchmarkDo is compared with:
// the least a first delivery can cost, a LoadOrStore that claims the key and
// a Store of the outcome, with no fingerprint, lease or context.
func BenchmarkSyncMap(b *testing.B) {
	b.Run("new-key", func(b *testing.B) {
		var m sync.Map
		ks := keys(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, loaded := m.LoadOrStore(ks[i], nil); !loaded {
				m.Store(ks[i], benchValue)
			}
		}
	})
	b.Run("duplicate", func(b *testing.B) {
		var m sync.Map
		m.Store("order-dup", benchValue)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, loaded := m.LoadOrStore("order-dup", nil); !loaded {
				b.Fatal("not loaded")
			}
		}
	})
	b.Run("new-key-parallel", func(b *testing.B) {
		var m sync.Map
		ks := keys(b.N)
		runParallel(b, func(i int64) {
			if _, loaded := m.LoadOrStore(ks[i], nil); !loaded {
				m.Store(ks[i], benchValue)
			}
		})
	})
	b.Run("duplicate-parallel", func(b *testing.B) {
		var m sync.Map
		ks := keys(1024)
		for _, k := range ks {
			m.Store(k, benchValue)
		}
		runParallel(b, func(i int64) {
			m.LoadOrStore(ks[i%1024], nil)
		})
	})
}

// BenchmarkDoBatch measures Guard.DoBatch on memstore, 64 new keys a
// batch: the bytes and allocations are per batch; divide by 64 for a
// record's share.
func BenchmarkDoBatch(b *testing.B) {
	const n = 64
	ctx := context.Background()
	g := newGuard(b, newMem(b), idem.Config{})
	ks := keys(n * b.N)
	ops := make([]idem.BatchOp, n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for j := range ops {
			ops[j] = idem.BatchOp{Key: ks[i*n+j], Payload: benchPayload}
		}
		for _, r := range g.DoBatch(ctx, ops, func(context.Context, int) ([]byte, error) { return benchValue, nil }) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
}

// BenchmarkBatchStoreCalls is BenchmarkDoBatch's limit: memstore's own
// ClaimBatch and CompleteBatch of 64 new keys, with the store keys and
// fingerprints built before the clock starts. What BenchmarkDoBatch
// allocates beyond it is the Guard's.
func BenchmarkBatchStoreCalls(b *testing.B) {
	const n = 64
	ctx := context.Background()
	s := newMem(b)
	ks := keys(n * b.N)
	args := make([]storage.ClaimArgs, n*b.N)
	for i, k := range ks {
		fp := sha256.Sum256(benchPayload)
		args[i] = storage.ClaimArgs{Key: storage.StoreKey("", k), Fingerprint: fp[:], Lease: idem.DefaultLease, Retention: idem.DefaultRetention}
	}
	cs := make([]storage.Completion, n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		batch := args[i*n : (i+1)*n]
		cls, err := s.ClaimBatch(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		for j, c := range cls {
			cs[j] = storage.Completion{Key: batch[j].Key, Token: c.Token, Value: benchValue, Retention: idem.DefaultRetention}
		}
		if _, err := s.CompleteBatch(ctx, cs); err != nil {
			b.Fatal(err)
		}
	}
}
