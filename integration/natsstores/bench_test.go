package natsstores_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/idemnats/idemnatstest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

// benchBatch is the Fetch batch of the bare consumer and of idemnats alike.
const benchBatch = 64

// benchServers are the servers whose CPU time the benchmark reports.
var benchServers = []string{"nats-server", "redis-server", "postgres"}

// benchPGConns is the size of PostgreSQL's pool in the benchmarks: go-redis's
// default for two cores (10 per GOMAXPROCS).
const benchPGConns = 20

// BenchmarkConsume measures messages/s through a JetStream pull consumer on
// the shared server: "bare" fetches batches of benchBatch and acks each
// message after its handler, the least a consumer with explicit acks does;
// "bare-redis", "bare-redis-fenced" and "bare-redis-each" are bare plus a
// dedupe through Redis written by hand (blind per batch, fenced per batch,
// and per message); the others are idemnats over memstore, Redis and
// PostgreSQL with the same batch. Handlers: a no-op, and 1ms of work (a sleep). Each run publishes
// b.N messages with distinct keys to a fresh stream before the timer
// starts; the timer stops once every message is acked (for idemnats: once
// Run has returned after the last handler, every message settled).
// scripts/bench-nats.sh runs it in interleaved rounds and prints ratios.
func BenchmarkConsume(b *testing.B) {
	handlers := []struct {
		name string
		work time.Duration
	}{{"noop", 0}, {"1ms", time.Millisecond}}
	for _, h := range handlers {
		b.Run("handler="+h.name, func(b *testing.B) {
			b.Run("bare", func(b *testing.B) { benchBare(b, h.work) })
			b.Run("bare-redis", func(b *testing.B) { benchBareRedis(b, h.work) })
			b.Run("bare-redis-fenced", func(b *testing.B) { benchBareRedisFenced(b, h.work) })
			b.Run("bare-redis-each", func(b *testing.B) { benchBareRedisEach(b, h.work) })
			// A pool as large as the Redis client's, so that PostgreSQL's
			// commits of a batch's claims share their fsyncs.
			for _, st := range storesWith(benchPGConns) {
				b.Run("idem="+st.name, func(b *testing.B) { benchIdem(b, st.new(b), h.work) })
			}
		})
	}
}

// benchStream returns a fresh stream holding n messages with distinct
// Nats-Msg-Ids, and its durable consumer.
func benchStream(b *testing.B, n int) jetstream.Consumer {
	b.Helper()
	_, js := idemnatstest.Connect(b, idemnatstest.URL())
	s := idemnatstest.NewStream(b, js, jetstream.StreamConfig{Duplicates: time.Second})
	cons := idemnatstest.NewConsumer(b, s, jetstream.ConsumerConfig{MaxAckPending: 4 * benchBatch})
	run := idemnatstest.Random(4)
	subj := idemnatstest.Subject(s, "payments")
	body := []byte(`{"type":"PaymentRequested","customer":"cus_8e03978e40d5","amount_cents":1999}`)
	flushed := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("publishing the benchmark's messages took over a minute")
		}
	}
	for i := range n {
		m := &nats.Msg{Subject: subj, Data: body, Header: nats.Header{jetstream.MsgIDHeader: {run + "-" + strconv.Itoa(i)}}}
		if _, err := js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			flushed() // stay below nats.go's cap on acks outstanding
		}
	}
	flushed()
	return cons
}

func work(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

func benchBare(b *testing.B, d time.Duration) {
	benchEach(b, benchStream(b, b.N), func(jetstream.Msg) { work(d) })
}

// benchEach fetches b.N messages from cons in batches, and acks each after
// handle, reporting msgs/s and the servers' CPU.
func benchEach(b *testing.B, cons jetstream.Consumer, handle func(msg jetstream.Msg)) {
	cpu := testenv.NewCPUMeter(benchServers...)
	b.ResetTimer()
	acked := 0
	for acked < b.N {
		mb, err := cons.Fetch(benchBatch, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for msg := range mb.Messages() {
			handle(msg)
			if err := msg.Ack(); err != nil {
				b.Fatal(err)
			}
			if acked++; acked == b.N {
				break // the last batch is short: do not wait for it to fill
			}
		}
		if err := mb.Error(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	cpu.Report(b, b.N)
}

// benchBareRedis is the least a consumer that dedupes through Redis does,
// with no library: bare's Fetch, then for each batch one pipeline of SET
// NX PX (a claim with a lease) of its keys, the handlers of the keys it
// set, one pipeline of SET PX (the outcome) of those keys, and an Ack per
// message. It is the bare limit of the Redis rows: what a claim and an
// outcome per message cost the consumer and Redis at the least, without
// fencing, fingerprints, takeovers or an outcome to replay.
func benchBareRedis(b *testing.B, d time.Duration) {
	ctx := context.Background()
	rdb := redisstoretest.Client(b)
	prefix := redisstoretest.Prefix(b, rdb) // its keys deleted when b ends
	claims := make([]*redis.BoolCmd, 0, benchBatch)
	benchBatches(b, func(msgs []jetstream.Msg) {
		claims = claims[:0]
		pipe := rdb.Pipeline()
		for _, msg := range msgs {
			claims = append(claims, pipe.SetNX(ctx, prefix+msg.Headers().Get(jetstream.MsgIDHeader), "1", time.Minute))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		for i, msg := range msgs {
			if claims[i].Val() {
				work(d)
				pipe.Set(ctx, prefix+msg.Headers().Get(jetstream.MsgIDHeader), "done", 24*time.Hour)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	})
}

// benchBareRedisFenced is the least a consumer that dedupes through Redis
// with fencing does on Redis 7.0 (redisstoretest.FencedDedupe): bare's
// Fetch, then for each batch one pipeline of SET NX PX of its keys, each
// with a token of its own, the handlers of the keys it set, one script per
// 128 of those keys (in one pipeline) that writes each outcome only while
// its key still holds its token, and an Ack per message.
func benchBareRedisFenced(b *testing.B, d time.Duration) {
	ctx := context.Background()
	rdb := redisstoretest.Client(b)
	prefix := redisstoretest.Prefix(b, rdb) // its keys deleted when b ends
	dedupe := redisstoretest.NewFencedDedupe(rdb, prefix, time.Minute, 24*time.Hour)
	outcome := []byte("done")
	keys := make([]string, 0, benchBatch)
	benchBatches(b, func(msgs []jetstream.Msg) {
		keys = keys[:0]
		for _, msg := range msgs {
			keys = append(keys, msg.Headers().Get(jetstream.MsgIDHeader))
		}
		claimed, err := dedupe.Claim(ctx, keys)
		if err != nil {
			b.Fatal(err)
		}
		for i := range msgs {
			if claimed[i] {
				work(d)
			}
		}
		if err := dedupe.Complete(ctx, outcome); err != nil {
			b.Fatal(err)
		}
	})
}

// benchBatches is bare's fetch loop, a batch at a time: it fetches b.N
// messages from a fresh stream in batches of benchBatch, hands each batch
// to handle, then acks its messages, and reports msgs/s and the CPU time
// per message.
func benchBatches(b *testing.B, handle func(msgs []jetstream.Msg)) {
	cons := benchStream(b, b.N)
	msgs := make([]jetstream.Msg, 0, benchBatch)
	cpu := testenv.NewCPUMeter(benchServers...)
	b.ResetTimer()
	acked := 0
	for acked < b.N {
		mb, err := cons.Fetch(min(benchBatch, b.N-acked), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		msgs = msgs[:0]
		for msg := range mb.Messages() {
			msgs = append(msgs, msg)
		}
		if err := mb.Error(); err != nil {
			b.Fatal(err)
		}
		handle(msgs)
		for _, msg := range msgs {
			if err := msg.Ack(); err != nil {
				b.Fatal(err)
			}
		}
		acked += len(msgs)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	cpu.Report(b, b.N)
}

// benchBareRedisEach is a dedupe through Redis written by hand, message by
// message in bare's fetch loop: a round trip of SET NX PX (a claim with a
// lease) before the handler, and when it set the key, a round trip of SET
// PX (the outcome) after it, then the message's Ack.
func benchBareRedisEach(b *testing.B, d time.Duration) {
	ctx := context.Background()
	rdb := redisstoretest.Client(b)
	cons := benchStream(b, b.N)
	prefix := redisstoretest.Prefix(b, rdb) // its keys deleted when b ends
	benchEach(b, cons, func(msg jetstream.Msg) {
		key := prefix + msg.Headers().Get(jetstream.MsgIDHeader)
		claimed, err := rdb.SetNX(ctx, key, "1", time.Minute).Result()
		if err != nil {
			b.Fatal(err)
		}
		if claimed {
			work(d)
			if err := rdb.Set(ctx, key, "done", 24*time.Hour).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchIdem(b *testing.B, store storage.Store, d time.Duration) {
	cons := benchStream(b, b.N)
	trips := &idemnatstest.TripCounter{Store: store}
	g := idemnatstest.Guard(b, trips, idem.Config{})
	var handled atomic.Int64
	all := make(chan struct{})
	n := int64(b.N)
	c, err := idemnats.New(g, cons, func(ctx context.Context, msg jetstream.Msg) error {
		work(d)
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	}, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithBatchSize(benchBatch))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cpu := testenv.NewCPUMeter(benchServers...)
	b.ResetTimer()
	go func() { done <- c.Run(ctx) }()
	<-all
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(trips.N.Load())/float64(b.N), "trips/msg")
	cpu.Report(b, b.N)
}
