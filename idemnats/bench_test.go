package idemnats_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
)

// benchBatch is the Fetch batch of the bare consumer and of idemnats alike.
const benchBatch = 64

// benchPGConns is the size of PostgreSQL's pool in the benchmarks: go-redis's
// default for two cores (10 per GOMAXPROCS).
const benchPGConns = 20

// BenchmarkConsume measures messages/s through a JetStream pull consumer on
// the shared server: "bare" fetches batches of benchBatch and acks each
// message after its handler, the least a consumer with explicit acks does;
// the others are idemnats over memstore, Redis and PostgreSQL with the same
// batch. Handlers: a no-op, and 1ms of work (a sleep). Each run publishes
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
	_, js := connect(b, natsURL)
	s := newStream(b, js, jetstream.StreamConfig{Duplicates: time.Second})
	cons := newConsumer(b, s, jetstream.ConsumerConfig{MaxAckPending: 4 * benchBatch})
	run := random(4)
	subj := subject(s, "payments")
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
	cons := benchStream(b, b.N)
	b.ResetTimer()
	acked := 0
	for acked < b.N {
		mb, err := cons.Fetch(benchBatch, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for msg := range mb.Messages() {
			work(d)
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
}

func benchIdem(b *testing.B, store idem.Store, d time.Duration) {
	cons := benchStream(b, b.N)
	g := newGuard(b, store, idem.Config{})
	var handled atomic.Int64
	all := make(chan struct{})
	n := int64(b.N)
	c, err := idemnats.New(g, cons, func(ctx context.Context, msg jetstream.Msg) error {
		work(d)
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	}, idemnats.WithSharedScope(), idemnats.WithBatchSize(benchBatch))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	go func() { done <- c.Run(ctx) }()
	<-all
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
