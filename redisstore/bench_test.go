package redisstore_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

// The benchmarks compare the store with a bare go-redis client running the
// least a Redis idempotency check can do: a claim script (SET NX with an
// expiry) and a complete script (compare the token, SET the value), with
// the same client options and goroutines, against the same server. Keys
// expire after benchRetention instead of being deleted. idem-bench store
// (cmd/idem-bench) runs the same cases in interleaved rounds and prints the
// ratios.

const benchRetention = 30 * time.Second

var (
	bareClaim = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0`)
	bareComplete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 0`)
)

// benchClient returns a client of the shared server whose pool lets 64
// goroutines each have a connection.
func benchClient(b *testing.B) *redis.Client {
	sharedClient(b) // skips when there is no server
	c := redis.NewClient(&redis.Options{Addr: redisAddr(), PoolSize: 64})
	b.Cleanup(func() { c.Close() })
	for _, s := range []*redis.Script{bareClaim, bareComplete} {
		if err := s.Load(context.Background(), c).Err(); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

func benchStore(b *testing.B, c redis.UniversalClient) *redisstore.Store {
	s, err := redisstore.New(c, redisstore.Config{Prefix: randomPrefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// parallel runs op(0) … op(b.N-1) on exactly goroutines goroutines and
// reports keys/s, perOp keys per op.
func parallel(b *testing.B, goroutines, perOp int, op func(n int) error) {
	b.ResetTimer()
	start := time.Now()
	testenv.Spread(b, b.N, goroutines, op)
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*perOp)/elapsed.Seconds(), "keys/s")
}

// A payment-like key: a 32-byte SHA-256 fingerprint and a 16-byte result.
var (
	benchFP     = sha256.Sum256([]byte("charge 10 EUR to card 4242"))
	benchResult = []byte("charge_0123456789")[:16]
)

func BenchmarkClaimComplete(b *testing.B) {
	ctx := context.Background()
	c := benchClient(b)
	for _, g := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("store/goroutines=%d", g), func(b *testing.B) {
			s := benchStore(b, c)
			parallel(b, g, 1, func(n int) error {
				a := storage.ClaimArgs{Key: storage.StoreKey("orders", "order-"+strconv.Itoa(n)), Fingerprint: benchFP[:], Lease: 30 * time.Second, Retention: benchRetention}
				cl, err := s.Claim(ctx, a)
				if err != nil {
					return err
				}
				if cl.Outcome != storage.Acquired {
					return fmt.Errorf("claim %d: %v", n, cl.Outcome)
				}
				return s.Complete(ctx, a.Key, cl.Token, benchResult, benchRetention)
			})
		})
		b.Run(fmt.Sprintf("bare/goroutines=%d", g), func(b *testing.B) {
			prefix := randomPrefix(b) + "bare:"
			ms := benchRetention.Milliseconds()
			parallel(b, g, 1, func(n int) error {
				key := prefix + "order-" + strconv.Itoa(n)
				token := strconv.Itoa(n)
				ok, err := bareClaim.Run(ctx, c, []string{key}, token, ms).Int()
				if err != nil || ok != 1 {
					return fmt.Errorf("bare claim %d: %d %v", n, ok, err)
				}
				return bareComplete.Run(ctx, c, []string{key}, token, benchResult, ms).Err()
			})
		})
	}
}

// BenchmarkGuardDo is Claim+Complete through the Guard, for its overhead.
func BenchmarkGuardDo(b *testing.B) {
	c := benchClient(b)
	for _, g := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			guard, err := idem.New(benchStore(b, c), idem.Config{Namespace: "orders", Retention: benchRetention})
			if err != nil {
				b.Fatal(err)
			}
			defer guard.Close()
			fn := func(context.Context) ([]byte, error) { return benchResult, nil }
			parallel(b, g, 1, func(n int) error {
				_, err := guard.Do(context.Background(), "order-"+strconv.Itoa(n), benchFP[:], fn)
				return err
			})
		})
	}
}

func BenchmarkClaimBatch100(b *testing.B) {
	const size = 100
	ctx := context.Background()
	c := benchClient(b)
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("store/goroutines=%d", g), func(b *testing.B) {
			s := benchStore(b, c)
			parallel(b, g, size, func(n int) error {
				args := orderArgs(n, size)
				got, err := s.ClaimBatch(ctx, args)
				if err == nil && got[size-1].Outcome != storage.Acquired {
					err = fmt.Errorf("batch %d: %v", n, got[size-1].Outcome)
				}
				return err
			})
		})
		b.Run(fmt.Sprintf("bare/goroutines=%d", g), func(b *testing.B) {
			prefix := randomPrefix(b) + "bare:"
			ms := benchRetention.Milliseconds()
			parallel(b, g, size, func(n int) error {
				p := c.Pipeline()
				cmds := make([]*redis.Cmd, size)
				for i := range cmds {
					id := strconv.Itoa(n*size + i)
					cmds[i] = bareClaim.EvalSha(ctx, p, []string{prefix + "order-" + id}, id, ms)
				}
				if _, err := p.Exec(ctx); err != nil {
					return err
				}
				if ok, _ := cmds[size-1].Int(); ok != 1 {
					return fmt.Errorf("bare batch %d: %d", n, ok)
				}
				return nil
			})
		})
	}
}

// BenchmarkMemoryPerRecord reports what Redis's MEMORY USAGE says one
// completed record takes with the default prefix: a Guard-style store key
// (namespace "orders", a 16-byte key), a SHA-256 fingerprint and a 16-byte
// result. bare is the bare scripts' record of the same key and result.
func BenchmarkMemoryPerRecord(b *testing.B) {
	ctx := context.Background()
	c := benchClient(b)
	s, err := redisstore.New(c, redisstore.Config{}) // "idem:"
	if err != nil {
		b.Fatal(err)
	}
	const n = 100
	run := randomPrefix(b)[9:21] // 12 hex digits: no clash with another run
	var store, bare int64
	for i := range n {
		key := storage.StoreKey("orders", fmt.Sprintf("%s%04d", run, i))
		cl, err := s.Claim(ctx, storage.ClaimArgs{Key: key, Fingerprint: benchFP[:], Lease: time.Minute, Retention: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, key, cl.Token, benchResult, time.Minute); err != nil {
			b.Fatal(err)
		}
		m, err := c.MemoryUsage(ctx, s.RedisKey(key), 0).Result()
		if err != nil {
			b.Fatal(err)
		}
		store += m
		s.Delete(ctx, key)

		bareKey := "bare:" + key
		bareClaim.Run(ctx, c, []string{bareKey}, "1", 60000)
		bareComplete.Run(ctx, c, []string{bareKey}, "1", benchResult, 60000)
		if m, err = c.MemoryUsage(ctx, bareKey, 0).Result(); err != nil {
			b.Fatal(err)
		}
		bare += m
		c.Del(ctx, bareKey)
	}
	b.ReportMetric(0, "ns/op") // a measure of space, not time
	b.ReportMetric(float64(store)/n, "bytes/record")
	b.ReportMetric(float64(bare)/n, "bare-bytes/record")
}

// BenchmarkBatch500 is a consumer's batch of 500 new keys: the store's
// ClaimBatch and CompleteBatch against the least a fenced batch check can
// send (fenced: a pipeline of SET NX, then a script that writes each
// outcome only where the key still holds its claim's token) and the least
// any batch check can send (pipeline: a pipeline of SET NX with an expiry
// and one of SET, blind), on 16 goroutines (a consumer's partitions).
// scripts/bench-redis-batch.sh counts the server's instructions per key
// of each. Each also reports the server's CPU time per key
// (server-cpu-us/key), which the machine's load moves less than a rate.
// Keys expire after benchRetention.
func BenchmarkBatch500(b *testing.B) {
	const size, goroutines = 500, 16
	ctx := context.Background()
	c := benchClient(b)
	b.Run("store", func(b *testing.B) {
		s := benchStore(b, c)
		defer serverCPU(b, c, size)()
		parallel(b, goroutines, size, func(n int) error {
			args := orderArgs(n, size)
			got, err := s.ClaimBatch(ctx, args)
			if err != nil {
				return err
			}
			cs := make([]storage.Completion, size)
			for i, cl := range got {
				if cl.Outcome != storage.Acquired {
					return fmt.Errorf("batch %d, entry %d: %v %v", n, i, cl.Outcome, cl.Err)
				}
				cs[i] = storage.Completion{Key: args[i].Key, Token: cl.Token, Value: benchResult, Retention: benchRetention}
			}
			errs, err := s.CompleteBatch(ctx, cs)
			if err == nil {
				err = errors.Join(errs...)
			}
			return err
		})
	})
	// The least a fenced dedupe does: the claims' SET NX pipeline, then
	// the outcomes written by a script that compares each key's token
	// first (redisstoretest.FencedDedupe), on no record format; and the
	// same keeping a record of the store's size (NewRecordDedupe).
	for _, side := range []struct {
		name   string
		record int
	}{{"fenced", 0}, {"record", redisstore.RecordHeaderLen + len(benchFP)}} {
		b.Run(side.name, func(b *testing.B) {
			prefix := randomPrefix(b) + side.name + ":"
			free := make(chan *redisstoretest.FencedDedupe, goroutines)
			for range goroutines {
				if side.record > 0 {
					free <- redisstoretest.NewRecordDedupe(c, prefix, 30*time.Second, benchRetention, side.record)
				} else {
					free <- redisstoretest.NewFencedDedupe(c, prefix, 30*time.Second, benchRetention)
				}
			}
			keys := make(chan []string, goroutines)
			for range goroutines {
				keys <- make([]string, size)
			}
			defer serverCPU(b, c, size)()
			parallel(b, goroutines, size, func(n int) error {
				f, ks := <-free, <-keys
				defer func() { free <- f; keys <- ks }()
				for i := range ks {
					ks[i] = "order-" + strconv.Itoa(n*size+i)
				}
				claimed, err := f.Claim(ctx, ks)
				if err != nil {
					return err
				}
				if i := slices.Index(claimed, false); i >= 0 {
					return fmt.Errorf("batch %d, entry %d: not claimed", n, i)
				}
				return f.Complete(ctx, benchResult)
			})
		})
	}
	b.Run("pipeline", func(b *testing.B) {
		prefix := randomPrefix(b) + "bare:"
		defer serverCPU(b, c, size)()
		parallel(b, goroutines, size, func(n int) error {
			p := c.Pipeline()
			for i := range size {
				p.SetNX(ctx, prefix+"order-"+strconv.Itoa(n*size+i), "t", benchRetention)
			}
			if _, err := p.Exec(ctx); err != nil {
				return err
			}
			for i := range size {
				p.Set(ctx, prefix+"order-"+strconv.Itoa(n*size+i), benchResult, benchRetention)
			}
			_, err := p.Exec(ctx)
			return err
		})
	})
}

// orderArgs returns the claims of the n-th batch of size keys.
func orderArgs(n, size int) []storage.ClaimArgs {
	args := make([]storage.ClaimArgs, size)
	for i := range args {
		args[i] = storage.ClaimArgs{Key: storage.StoreKey("orders", "order-"+strconv.Itoa(n*size+i)), Fingerprint: benchFP[:], Lease: 30 * time.Second, Retention: benchRetention}
	}
	return args
}

// serverCPU reads the server's CPU time (INFO cpu, user and system) and
// returns the function that reports, at the end of b, how much of it each
// of the b.N*perOp keys took.
func serverCPU(b *testing.B, c *redis.Client, perOp int) func() {
	used := func() float64 {
		var total float64
		for _, field := range strings.Fields(c.Info(context.Background(), "cpu").Val()) {
			if k, v, ok := strings.Cut(field, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
		return total
	}
	start := used()
	return func() { b.ReportMetric((used()-start)*1e6/float64(b.N*perOp), "server-cpu-us/key") }
}
