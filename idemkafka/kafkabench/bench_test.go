package kafkabench_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemkafka/internal/consume"
	"github.com/idemgo/idem/idemkafka/internal/kafkatest"
	"github.com/idemgo/idem/idemkafka/kafkapg"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

// BenchmarkKafka consumes one topic of 16 partitions, records of which a
// fifth are duplicates of a recent record (on its partition, or on another
// with IDEM_KAFKA_BENCH_DUPLICATES=other), once per case, each case with a consumer group of its own and one member. The
// cases run one after the other in one process, each beside the limit it
// is measured against:
//
//	noop/bare          a bare franz-go group consumer: a goroutine per partition, mark, autocommit the marks
//	noop/mem           idemkafka over memstore, a handler that does nothing
//	noop/redis-limit   bare, plus per batch the least a Redis check writes: a pipeline of SET NX, one of SET
//	noop/redis-fenced  bare, plus per batch the least a fenced Redis dedupe does (redisstoretest.FencedDedupe):
//	                   a pipeline of SET NX PX with a token per key, then a pipeline of scripts that SET each
//	                   outcome only while its key holds its token, one script per 128 keys
//	noop/redis-record  noop/redis-fenced with a record of redisstore's size in place of the token (56 bytes:
//	                   its header and a SHA-256 fingerprint), claimed with SET … NX GET, the outcome after it
//	                   (redisstoretest.NewRecordDedupe): the least a fenced dedupe that keeps such a record does
//	noop/redis-each    bare, plus per record a hand-rolled dedupe: one SET NX PX round trip, then, when it set
//	                   the key, one SET PX round trip
//	noop/redis-store   bare, plus per batch redisstore's ClaimBatch and CompleteBatch of its keys, no Guard: the store's own cost
//	noop/redis         idemkafka over redisstore (ClaimBatch, CompleteBatch)
//	noop/pg-limit      bare, plus per batch an INSERT … ON CONFLICT DO NOTHING and an UPDATE over unnest
//	noop/pg-store      bare, plus per batch pgstore's ClaimBatch and CompleteBatch
//	noop/pg            idemkafka over pgstore
//	1ms/bare, 1ms/redis  the same with a handler that takes 1ms
//	tx/bare            bare, one transaction per batch: a business row per record and the offset
//	tx/store           tx/bare, plus in its transaction pgstore's ClaimBatch and CompleteBatch, no Guard
//	tx/batch           kafkapg per batch: the same rows, the idem records and the offset
//	tx/record          kafkapg per record
//
// Each reports records/s, from the partitions' assignment to the last
// record finished (the group's join is not counted), and the CPU time the
// Redis server used per record (redis-cpu-us/record, read from INFO cpu). The number of records is
// IDEM_KAFKA_BENCH_RECORDS (default 200000). Run it with
// scripts/bench-kafka.sh, which repeats it and prints the ratios.
func BenchmarkKafka(b *testing.B) {
	f := newFixture(b)
	for _, c := range []struct {
		name string
		run  func(b *testing.B, f *fixture) float64
	}{
		{"noop/bare", func(b *testing.B, f *fixture) float64 { return f.bare(b, nil) }},
		{"noop/mem", func(b *testing.B, f *fixture) float64 { return f.idem(b, f.mem(b), 0) }},
		{"noop/redis-limit", func(b *testing.B, f *fixture) float64 { return f.bare(b, f.redisLimit(b)) }},
		{"noop/redis-fenced", func(b *testing.B, f *fixture) float64 { return f.bare(b, f.redisFenced(b, 0)) }},
		{"noop/redis-record", func(b *testing.B, f *fixture) float64 { return f.bare(b, f.redisFenced(b, recordSize)) }},
		{"noop/redis-each", func(b *testing.B, f *fixture) float64 { return f.bare(b, f.redisEach(b)) }},
		{"noop/redis-store", func(b *testing.B, f *fixture) float64 { return f.bare(b, f.storeBatches(f.redisStore(b))) }},
		{"noop/redis", func(b *testing.B, f *fixture) float64 { return f.idem(b, f.redisStore(b), 0) }},
		{"noop/pg-limit", func(b *testing.B, f *fixture) float64 { return f.bare(b, f.pgLimit(b)) }},
		{"noop/pg-store", func(b *testing.B, f *fixture) float64 { return f.bare(b, f.storeBatches(f.pgStore(b))) }},
		{"noop/pg", func(b *testing.B, f *fixture) float64 { return f.idem(b, f.pgStore(b), 0) }},
		{"1ms/bare", func(b *testing.B, f *fixture) float64 { return f.bare(b, sleep(time.Millisecond)) }},
		{"1ms/redis", func(b *testing.B, f *fixture) float64 { return f.idem(b, f.redisStore(b), time.Millisecond) }},
		{"tx/bare", func(b *testing.B, f *fixture) float64 { return f.bare(b, f.txBare(b, false)) }},
		{"tx/store", func(b *testing.B, f *fixture) float64 { return f.bare(b, f.txBare(b, true)) }},
		{"tx/batch", func(b *testing.B, f *fixture) float64 { return f.tx(b, false) }},
		{"tx/record", func(b *testing.B, f *fixture) float64 { return f.tx(b, true) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var rate float64
			cpu := f.redisCPU(b)
			for range b.N {
				rate = c.run(b, f)
			}
			b.ReportMetric(rate, "records/s")
			b.ReportMetric((f.redisCPU(b)-cpu).Seconds()*1e6/float64(b.N*f.n), "redis-cpu-us/record")
			b.ReportMetric(0, "ns/op") // one op is one whole consumption: the rate says it
		})
	}
}

const (
	partitions = 16
	maxBatch   = 500
)

// fixture is the benchmark's cluster, with the topic produced once, and
// its stores.
type fixture struct {
	cluster *kafkatest.Cluster
	topic   string // the benchmark's own, of partitions partitions
	n       int    // records in the topic
	run     string

	redis  *redis.Client
	pool   *pgxpool.Pool
	schema string
}

func newFixture(b *testing.B) *fixture {
	n, _ := strconv.Atoi(os.Getenv("IDEM_KAFKA_BENCH_RECORDS"))
	otherPartition := os.Getenv("IDEM_KAFKA_BENCH_DUPLICATES") == "other"
	c := kafkatest.NewCluster(b, map[string]int32{"orders": partitions})
	f := &fixture{cluster: c, topic: c.Name("orders"), n: cmp.Or(n, 200000), run: random()}
	recs := make([]*kgo.Record, f.n)
	for i := range recs {
		o, p := i, int32(i%partitions)
		if i%5 == 4 { // a duplicate of an earlier record
			o = i - 3*partitions // on the same partition, as a producer's retry lands
			if o < 0 {
				o = i // the first records have none before them
			}
			if otherPartition {
				o, p = i-3, int32((i+7)%partitions) // a few records later, on another partition
			}
		}
		key := fmt.Sprintf("order-%s-%07d", f.run, o)
		recs[i] = kafkatest.Keyed(f.topic, p, key, fmt.Sprintf(`{"type":"OrderCreated","order":%q,"customer":"cus_%04d","amount_cents":%d}`, key, o%9973, 500+o%50000))
	}
	kafkatest.Produce(b, f.cluster.ListenAddrs(), recs...)
	f.connect(b)
	return f
}

func random() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var redisServer = testenv.Server{Name: "Redis", Env: "IDEM_REDIS_ADDR", Default: "127.0.0.1:6379"}

// connect connects to Redis and PostgreSQL, and creates a schema of the
// run's own with the records, offsets and business tables. Both servers
// are needed: without one the benchmark is skipped (failed under
// IDEM_REQUIRE_SERVICES=1).
func (f *fixture) connect(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: redisServer.Addr(), PoolSize: 2 * partitions})
	b.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		redisServer.Unreachable(b, redisServer.Addr(), err)
	}
	pool := pgstoretest.Pool(b, 2*partitions)
	schema := pgstoretest.Schema(b, pool)
	for _, sql := range []string{
		"CREATE TABLE " + schema + ".charges (order_key text NOT NULL, body bytea NOT NULL)",
		"CREATE TABLE " + schema + ".bare (key text PRIMARY KEY, done boolean NOT NULL DEFAULT false)",
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			b.Fatal(err)
		}
	}
	if err := pgstore.Migrate(ctx, pool, schema+".idem_records"); err != nil {
		b.Fatal(err)
	}
	for _, t := range []string{".offsets", ".bare_offsets"} {
		if err := kafkapg.Migrate(ctx, pool, schema+t); err != nil {
			b.Fatal(err)
		}
	}
	f.redis, f.pool, f.schema = c, pool, schema
}

func (f *fixture) redisClient(*testing.B) *redis.Client { return f.redis }

// redisCPU returns the CPU time the Redis server has used (INFO cpu: user
// and system, its main thread and the others), so that a case can report
// the server's work per record, which the machine's load moves less than
// a rate.
func (f *fixture) redisCPU(b *testing.B) time.Duration {
	info, err := f.redis.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for line := range strings.Lines(info) {
		name, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			x, _ := strconv.ParseFloat(v, 64)
			sec += x
		}
	}
	return time.Duration(sec * float64(time.Second))
}

func (f *fixture) pgPool(*testing.B) *pgxpool.Pool { return f.pool }

// progress times a consumption: from the partitions' assignment (the
// group's join is not counted) to the last record finished.
type progress struct {
	n     int64
	count atomic.Int64
	mu    sync.Mutex
	start time.Time
	last  time.Time
	done  chan struct{}
}

func newProgress(n int) *progress { return &progress{n: int64(n), done: make(chan struct{})} }

// assigned notes the first assignment.
func (p *progress) assigned() {
	p.mu.Lock()
	if p.start.IsZero() {
		p.start = time.Now()
	}
	p.mu.Unlock()
}

func (p *progress) add(k int) {
	now := time.Now()
	c := p.count.Add(int64(k))
	p.mu.Lock()
	p.last = now
	p.mu.Unlock()
	if c == p.n {
		close(p.done)
	}
}

// rate waits for every record and returns the records per second.
func (p *progress) rate(b *testing.B) float64 {
	select {
	case <-p.done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%d of %d records finished in 10 minutes", p.count.Load(), p.n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return float64(p.n) / p.last.Sub(p.start).Seconds()
}

func (f *fixture) group() string { return f.cluster.Name("bench-" + random()) }

// bare consumes the topic with a bare group consumer: a goroutine per
// partition runs handle over chunks of at most maxBatch records (nil:
// nothing), marks the last, and the client autocommits the marks.
func (f *fixture) bare(b *testing.B, handle func(ctx context.Context, p int32, recs []*kgo.Record) error) float64 {
	prog := newProgress(f.n)
	cl, err := kgo.NewClient(append(kafkatest.ClientOpts(f.cluster.ListenAddrs(), f.group(), f.topic),
		kgo.AutoCommitMarks(), kgo.AutoCommitInterval(time.Second),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { prog.assigned() }))...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	work := map[int32]chan []*kgo.Record{}
	wg.Go(func() {
		defer func() {
			for _, ch := range work {
				close(ch)
			}
		}()
		for ctx.Err() == nil {
			cl.PollRecords(ctx, 0).EachPartition(func(fp kgo.FetchTopicPartition) {
				ch := work[fp.Partition]
				if ch == nil {
					// Room for every chunk of the partition: a full channel would
					// hold up the other partitions of the poll.
					ch = make(chan []*kgo.Record, f.n/maxBatch+partitions)
					work[fp.Partition] = ch
					wg.Go(func() {
						for recs := range ch {
							if handle != nil {
								if err := handle(ctx, fp.Partition, recs); err != nil && ctx.Err() == nil {
									b.Error(err)
								}
							}
							cl.MarkCommitRecords(recs[len(recs)-1])
							prog.add(len(recs))
						}
					})
				}
				for recs := fp.Records; len(recs) > 0; {
					k := min(len(recs), maxBatch)
					select {
					case ch <- recs[:k]:
					case <-ctx.Done():
						return
					}
					recs = recs[k:]
				}
			})
		}
	})
	rate := prog.rate(b)
	cancel()
	wg.Wait()
	return rate
}

// idem consumes the topic with idemkafka over store, a handler taking d.
func (f *fixture) idem(b *testing.B, store storage.Store, d time.Duration) float64 {
	g, err := idem.New(store, idem.Config{Namespace: "bench-" + random()})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	prog := newProgress(f.n)
	handler := func(context.Context, *kgo.Record) error {
		if d > 0 {
			time.Sleep(d)
		}
		return nil
	}
	c, err := idemkafka.New(g, handler, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithMaxBatch(maxBatch), idemkafka.WithObserver(progressObserver(prog)), debugLogger())
	if err != nil {
		b.Fatal(err)
	}
	return f.consume(b, prog, c.ClientOpts(), c.Run)
}

// debugLogger logs the consumers' retries when IDEM_KAFKA_BENCH_DEBUG is set.
func debugLogger() idemkafka.Option {
	if os.Getenv("IDEM_KAFKA_BENCH_DEBUG") == "" {
		return func(*consume.Options) {}
	}
	return idemkafka.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

func progressObserver(p *progress) func(context.Context, idemkafka.Event) {
	return func(_ context.Context, e idemkafka.Event) {
		switch e.Kind {
		case idemkafka.EventAssigned:
			p.assigned()
		case idemkafka.EventBatch:
			p.add(e.Records)
		}
	}
}

// consume runs a consumer (its ClientOpts and Run) until prog is done.
func (f *fixture) consume(b *testing.B, prog *progress, opts []kgo.Opt, run func(context.Context, *kgo.Client) error) float64 {
	cl, err := kgo.NewClient(append(kafkatest.ClientOpts(f.cluster.ListenAddrs(), f.group(), f.topic), opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cl) }()
	rate := prog.rate(b)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return rate
}

func sleep(d time.Duration) func(context.Context, int32, []*kgo.Record) error {
	return func(_ context.Context, _ int32, recs []*kgo.Record) error {
		for range recs {
			time.Sleep(d)
		}
		return nil
	}
}

func (f *fixture) mem(b *testing.B) storage.Store {
	b.Helper()
	return idemtest.MemStore(b)
}

func (f *fixture) redisStore(b *testing.B) storage.Store {
	return redisstoretest.Store(b, f.redisClient(b), redisstore.Config{}) // its keys deleted after the case
}

func (f *fixture) pgStore(b *testing.B) storage.Store {
	s, err := pgstore.New(f.pgPool(b), pgstore.Config{Table: f.schema + ".idem_records"})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// redisLimit is the least a Redis check does per batch: claim every key
// with SET NX in one pipeline, store the outcome of each key claimed with
// SET in another (a duplicate writes nothing more).
func (f *fixture) redisLimit(b *testing.B) func(context.Context, int32, []*kgo.Record) error {
	c := f.redisClient(b)
	prefix := redisstoretest.Prefix(b, c) // its keys deleted after the case
	return func(ctx context.Context, _ int32, recs []*kgo.Record) error {
		p := c.Pipeline()
		claims := make([]*redis.BoolCmd, len(recs))
		for i, r := range recs {
			claims[i] = p.SetNX(ctx, prefix+kafkatest.HeaderKey(r), "t", time.Minute)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		n := 0
		for i, r := range recs {
			if claims[i].Val() { // a duplicate's outcome is its original's
				p.Set(ctx, prefix+kafkatest.HeaderKey(r), "done", time.Minute)
				n++
			}
		}
		if n == 0 {
			return nil
		}
		_, err := p.Exec(ctx)
		return err
	}
}

// redisFenced is the least a fenced Redis dedupe does per batch (see
// redisstoretest.FencedDedupe): claim every key with a token in one
// pipeline, then store the outcome of each key claimed, only while it holds
// its token, in one pipeline of scripts. Each partition's goroutine has a
// FencedDedupe of its own. With record > 0 each key keeps a record of that
// many bytes (redisstoretest.NewRecordDedupe).
func (f *fixture) redisFenced(b *testing.B, record int) func(context.Context, int32, []*kgo.Record) error {
	c := f.redisClient(b)
	prefix := redisstoretest.Prefix(b, c) // its keys deleted after the case
	type part struct {
		d    *redisstoretest.FencedDedupe
		keys []string
	}
	parts := make([]part, partitions)
	for i := range parts {
		if record > 0 {
			parts[i].d = redisstoretest.NewRecordDedupe(c, prefix, 30*time.Second, time.Hour, record)
		} else {
			parts[i].d = redisstoretest.NewFencedDedupe(c, prefix, 30*time.Second, time.Hour)
		}
	}
	outcome := []byte("done")
	return func(ctx context.Context, p int32, recs []*kgo.Record) error {
		pt := &parts[p]
		pt.keys = pt.keys[:0]
		for _, r := range recs {
			pt.keys = append(pt.keys, kafkatest.HeaderKey(r))
		}
		if _, err := pt.d.Claim(ctx, pt.keys); err != nil {
			return err
		}
		// The handler, a no-op, would run here for the records claimed.
		return pt.d.Complete(ctx, outcome)
	}
}

// recordSize is the size of redisstore's record in progress for a SHA-256
// fingerprint, the Guard's: a 24-byte header and the 32-byte fingerprint.
const recordSize = 24 + sha256.Size

// redisEach is a hand-rolled dedupe, record by record on the partition's
// goroutine: a round trip of SET NX PX before the handler, and when it set
// the key, a round trip of SET PX after it.
func (f *fixture) redisEach(b *testing.B) func(context.Context, int32, []*kgo.Record) error {
	c := f.redisClient(b)
	prefix := redisstoretest.Prefix(b, c) // its keys deleted after the case
	return func(ctx context.Context, _ int32, recs []*kgo.Record) error {
		for _, r := range recs {
			key := prefix + kafkatest.HeaderKey(r)
			claimed, err := c.SetNX(ctx, key, "t", 30*time.Second+time.Hour).Result()
			if err != nil {
				return err
			}
			if !claimed {
				continue // a duplicate: skip it
			}
			// The handler, a no-op, would run here.
			if err := c.Set(ctx, key, "done", time.Hour).Err(); err != nil {
				return err
			}
		}
		return nil
	}
}

// storeBatches is the store's own work for a batch, without the Guard and
// the consumer: one ClaimBatch of the records' keys, one CompleteBatch.
func (f *fixture) storeBatches(s storage.Store) func(context.Context, int32, []*kgo.Record) error {
	ns := "bench-" + random()
	return func(ctx context.Context, _ int32, recs []*kgo.Record) error {
		complete, err := storeBatch(ctx, s, ns, recs)
		if err != nil {
			return err
		}
		return complete()
	}
}

// storeBatch claims the keys of recs under ns with one ClaimBatch of s,
// each key once (as Guard.DoBatch and kafkapg do: a key's later records
// are its duplicates), and returns the CompleteBatch of those acquired.
func storeBatch(ctx context.Context, s storage.Store, ns string, recs []*kgo.Record) (complete func() error, err error) {
	args := make([]storage.ClaimArgs, 0, len(recs))
	seen := make(map[string]bool, len(recs))
	for _, r := range recs {
		k := storage.StoreKey(ns, kafkatest.HeaderKey(r))
		if seen[k] {
			continue
		}
		seen[k] = true
		args = append(args, storage.ClaimArgs{Key: k, Fingerprint: idem.SHA256Fingerprint(nil, r.Value), Lease: 30 * time.Second, Retention: time.Hour})
	}
	cls, err := s.ClaimBatch(ctx, args)
	if err != nil {
		return nil, err
	}
	var cs []storage.Completion
	for i, c := range cls {
		if c.Outcome == storage.Acquired {
			cs = append(cs, storage.Completion{Key: args[i].Key, Token: c.Token, Retention: time.Hour})
		}
	}
	return func() error {
		_, err := s.CompleteBatch(ctx, cs)
		return err
	}, nil
}

// pgLimit is the least a PostgreSQL check does per batch: insert every key
// that is not there in one statement, mark them done in another.
func (f *fixture) pgLimit(b *testing.B) func(context.Context, int32, []*kgo.Record) error {
	pool := f.pgPool(b)
	table := f.schema + ".bare"
	prefix := random() + ":"
	return func(ctx context.Context, _ int32, recs []*kgo.Record) error {
		keys := make([]string, len(recs))
		for i, r := range recs {
			keys[i] = prefix + kafkatest.HeaderKey(r)
		}
		if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (key) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING", keys); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, "UPDATE "+table+" SET done = true WHERE key = ANY($1)", keys)
		return err
	}
}

// txBare is the bare transactional consumer: per batch, a transaction
// with a business row per record and the partition's offset; withStore
// adds in it pgstore's ClaimBatch of the records' keys before the rows and
// its CompleteBatch after, the least kafkapg does with pgstore.
func (f *fixture) txBare(b *testing.B, withStore bool) func(context.Context, int32, []*kgo.Record) error {
	pool := f.pgPool(b)
	records := f.schema + ".idem_records"
	group := f.group()
	ns := "bench-" + random()
	insert := "INSERT INTO " + f.schema + ".charges (order_key, body) VALUES ($1, $2)"
	offsets := "INSERT INTO " + f.schema + ".bare_offsets AS o (consumer_group, topic, partition, next_offset, leader_epoch) VALUES ($1, $2, $3, $4, $5) " +
		"ON CONFLICT (consumer_group, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset WHERE o.next_offset < EXCLUDED.next_offset"
	return func(ctx context.Context, partition int32, recs []*kgo.Record) error {
		return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			var done func() error
			if withStore {
				s, err := pgstore.New(tx, pgstore.Config{Table: records})
				if err != nil {
					return err
				}
				if done, err = storeBatch(ctx, s, ns, recs); err != nil {
					return err
				}
			}
			for _, r := range recs {
				if _, err := tx.Exec(ctx, insert, kafkatest.HeaderKey(r), r.Value); err != nil {
					return err
				}
			}
			if done != nil {
				if err := done(); err != nil {
					return err
				}
			}
			last := recs[len(recs)-1]
			_, err := tx.Exec(ctx, offsets, group, f.topic, partition, last.Offset+1, last.LeaderEpoch)
			return err
		})
	}
}

// tx consumes with kafkapg, a business row per record, per batch or per
// record.
func (f *fixture) tx(b *testing.B, perRecord bool) float64 {
	pool := f.pgPool(b)
	insert := "INSERT INTO " + f.schema + ".charges (order_key, body) VALUES ($1, $2)"
	prog := newProgress(f.n)
	opts := []kafkapg.Option{
		kafkapg.WithRecordsTable(f.schema + ".idem_records"), kafkapg.WithOffsetsTable(f.schema + ".offsets"), kafkapg.WithNamespace("bench-" + random()),
		kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithMaxBatch(maxBatch), idemkafka.WithObserver(progressObserver(prog))),
	}
	if perRecord {
		opts = append(opts, kafkapg.WithPerRecordTransactions())
	}
	c, err := kafkapg.New(pool, func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		_, err := tx.Exec(ctx, insert, kafkatest.HeaderKey(r), r.Value)
		return err
	}, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return f.consume(b, prog, c.ClientOpts(), c.Run)
}
