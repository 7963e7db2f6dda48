package amqpstores_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/coalesce"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/idemamqp/idemamqptest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

// The consumers of the benchmark share these settings, which
// IDEM_BENCH_PREFETCH and IDEM_BENCH_CONCURRENCY override.
var (
	benchPrefetch    = envInt("IDEM_BENCH_PREFETCH", 64)
	benchConcurrency = envInt("IDEM_BENCH_CONCURRENCY", 32)
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkConsume measures messages/s through a classic queue filled
// beforehand with b.N messages, each with its own key: a bare amqp091
// consumer (benchConcurrency goroutines, the same prefetch, an ack per
// message) beside idemamqp over memstore, Redis and PostgreSQL (each
// remote store also wrapped in coalesce.New), with a
// handler that does nothing and one that sleeps 1ms. Run it with a fixed
// count (-benchtime 20000x) and the runs interleaved: scripts/bench-amqp.sh.
func BenchmarkConsume(b *testing.B) {
	handlers := []struct {
		name  string
		pause time.Duration
	}{{"noop", 0}, {"1ms", time.Millisecond}}
	for _, h := range handlers {
		b.Run("handler="+h.name, func(b *testing.B) {
			b.Run("bare", func(b *testing.B) { benchBare(b, h.pause, nil) })
			b.Run("bare-redis", func(b *testing.B) { benchBareRedis(b, h.pause) })
			b.Run("memstore", func(b *testing.B) {
				s, err := memstore.New(memstore.Config{MaxEntries: 1 << 22})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Close() })
				benchIdem(b, s, h.pause)
			})
			b.Run("redis", func(b *testing.B) { benchIdem(b, benchRedis(b), h.pause) })
			b.Run("redis-guard", func(b *testing.B) { benchGuard(b, benchRedis(b), h.pause) })
			b.Run("redis-coalesced", func(b *testing.B) { benchIdem(b, coalesce.New(benchRedis(b)), h.pause) })
			b.Run("redis-coalesced-guard", func(b *testing.B) { benchGuard(b, coalesce.New(benchRedis(b)), h.pause) })
			b.Run("postgres", func(b *testing.B) { benchIdem(b, benchPostgres(b), h.pause) })
			b.Run("postgres-guard", func(b *testing.B) { benchGuard(b, benchPostgres(b), h.pause) })
			b.Run("postgres-coalesced", func(b *testing.B) { benchIdem(b, coalesce.New(benchPostgres(b)), h.pause) })
			b.Run("postgres-coalesced-guard", func(b *testing.B) { benchGuard(b, coalesce.New(benchPostgres(b)), h.pause) })
		})
	}
}

// benchRedis returns a store on the test Redis whose client has a
// connection per handler goroutine, as a service would size its pool.
func benchRedis(b *testing.B) storage.Store {
	redisstoretest.Client(b) // skips or fails when unreachable
	c := redis.NewClient(&redis.Options{Addr: redisstoretest.Addr(), PoolSize: benchConcurrency})
	b.Cleanup(func() { c.Close() })
	return redisstoretest.Store(b, c, redisstore.Config{})
}

// benchPostgres returns a store on the test PostgreSQL with a connection
// per handler goroutine.
func benchPostgres(b *testing.B) storage.Store {
	return pgstoretest.Store(b, pgstoretest.Pool(b, int32(benchConcurrency)), pgstore.Config{})
}

// benchGuard runs b.N Guard.Do calls of new keys over s on
// benchConcurrency goroutines, without a broker: the store's own ceiling
// for the consumer, in the same run.
func benchGuard(b *testing.B, s storage.Store, d time.Duration) {
	g, err := idem.New(s, idem.Config{Namespace: "bench-" + rand.Text()})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	run := rand.Text()[:8]
	var next atomic.Int64
	cpu := testenv.NewCPUMeter(benchServers...)
	start := time.Now()
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				k := fmt.Sprintf("order-%s-%08d", run, i)
				body := `{"type":"OrderCreated","order":"` + k + `","amount_cents":4200}`
				if _, err := g.Do(context.Background(), k, []byte(body), func(context.Context) ([]byte, error) {
					pause(d)
					return nil, nil
				}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	report(b, b.N, time.Since(start), cpu)
}

// fill returns a new classic queue holding n messages with distinct keys.
func fill(b *testing.B, n int) *idemamqptest.Queue {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	q := idemamqptest.NewQueue(b, idemamqptest.Connect(b), idemamqptest.Classic, nil)
	run := rand.Text()[:8]
	const batch = 1000
	msgs := make([]idemamqptest.Msg, 0, batch)
	for i := 0; i < n; i += batch {
		msgs = msgs[:0]
		for j := i; j < min(i+batch, n); j++ {
			k := fmt.Sprintf("order-%s-%08d", run, j)
			msgs = append(msgs, idemamqptest.Msg{Key: k, Body: `{"type":"OrderCreated","order":"` + k + `","amount_cents":4200}`})
		}
		q.Publish(msgs...)
	}
	return q
}

func pause(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

// report reports the rate of n messages in elapsed, and what they cost
// the CPU of this process and of the servers.
func report(b *testing.B, n int, elapsed time.Duration, cpu *testenv.CPUMeter) {
	b.ReportMetric(float64(n)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(0, "ns/op")
	cpu.Report(b, n)
}

// benchServers are the servers whose CPU time the benchmark reports:
// RabbitMQ's Erlang VM, Redis and PostgreSQL.
var benchServers = []string{"beam.smp", "redis-server", "postgres"}

// benchBare consumes with amqp091 alone: the least a consumer with manual
// acks does. handle, when not nil, runs each delivery's handler (a pause
// of d) in place of the bare pause.
func benchBare(b *testing.B, d time.Duration, handle func(m amqp.Delivery) error) {
	if handle == nil {
		handle = func(amqp.Delivery) error { pause(d); return nil }
	}
	q := fill(b, b.N)
	cpu := testenv.NewCPUMeter(benchServers...)
	start := time.Now()
	conn, err := amqp.Dial(idemamqptest.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Qos(benchPrefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := ch.Consume(q.Name, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	var acked atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Go(func() {
			for m := range deliveries {
				if err := handle(m); err != nil {
					b.Error(err)
					return
				}
				if err := m.Ack(false); err != nil {
					b.Error(err)
					return
				}
				if acked.Add(1) == int64(b.N) {
					close(done)
				}
			}
		})
	}
	<-done
	report(b, b.N, time.Since(start), cpu)
	b.StopTimer()
	ch.Close()
	wg.Wait()
}

// benchIdem consumes with idemamqp over s.
func benchIdem(b *testing.B, s storage.Store, d time.Duration) {
	q := fill(b, b.N)
	g, err := idem.New(s, idem.Config{Namespace: "bench-" + rand.Text()})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	var acked atomic.Int64
	done := make(chan struct{})
	observe := func(_ context.Context, e idemamqp.Event) {
		if e.Kind == idemamqp.EventAcked && acked.Add(1) == int64(b.N) {
			close(done)
		}
	}
	h := func(context.Context, amqp.Delivery) error {
		pause(d)
		return nil
	}
	c, err := idemamqp.New(g, idemamqptest.URL(), q.Name, h, idemamqp.WithSharedScope(), idemamqp.WithDiscardPoison(),
		idemamqp.WithPrefetch(benchPrefetch), idemamqp.WithConcurrency(benchConcurrency), idemamqp.WithObserver(observe))
	if err != nil {
		b.Fatal(err)
	}
	q.DeleteAtEnd(c.DelayQueue())
	ctx, cancel := context.WithCancel(context.Background())
	cpu := testenv.NewCPUMeter(benchServers...)
	start := time.Now()
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	<-done
	report(b, b.N, time.Since(start), cpu)
	b.StopTimer()
	cancel()
	if err := <-ran; err != nil {
		b.Error(err)
	}
	if n := acked.Load(); n != int64(b.N) {
		b.Errorf("%d acks, want %d", n, b.N)
	}
}

// benchBareRedis is the least a consumer that dedupes each delivery
// through Redis does, with no library: bare, with the handler between a
// SET NX PX of the delivery's key (a claim with a lease) and a SET PX of
// its outcome, one round trip each, on a client with a connection per
// handler goroutine. It is the bare limit of the Redis rows: what a claim
// and an outcome per message cost at the least, without fencing,
// fingerprints, takeovers or an outcome to replay.
func benchBareRedis(b *testing.B, d time.Duration) {
	redisstoretest.Client(b) // skips or fails when unreachable
	rdb := redis.NewClient(&redis.Options{Addr: redisstoretest.Addr(), PoolSize: benchConcurrency})
	b.Cleanup(func() { rdb.Close() })
	prefix := redisstoretest.Prefix(b, rdb) // its keys deleted when b ends
	ctx := context.Background()
	benchBare(b, d, func(m amqp.Delivery) error {
		key, _ := m.Headers["idempotency-key"].(string)
		set, err := rdb.SetNX(ctx, prefix+key, "1", time.Minute).Result()
		if err != nil || !set {
			return err
		}
		pause(d)
		return rdb.Set(ctx, prefix+key, "done", 24*time.Hour).Err()
	})
}
