package natspub_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/natspub"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// BenchmarkRelayVsRaw measures how fast a Relay drains an outbox of
// 20,000 messages into JetStream (this machine's NATS, a file-backed
// stream of the benchmark's own) beside the broker's own limit, measured
// in the same process with the same batching: "raw" publishes the same
// messages, 100 at a time, with PublishMsgAsync and Nats-Msg-Id, and
// waits for the batch's acks before the next. The relay does that plus
// reading each batch from PostgreSQL and marking it sent (one round trip
// for both, while the broker takes the batch before), and sends a batch in
// rounds of one message per key. Messages are spread over 1,000 keys (a
// batch of 100 holds 100 keys: one round), with sent rows marked or
// deleted (RelayConfig.DeleteSent), or over 10 keys (ten rounds of ten). Each round measures raw and relay one
// after the other, alternating which goes first; the metrics are the
// medians of the rates and of each round's own relay ÷ raw ratio.
//
//	go test -run '^$' -bench RelayVsRaw -benchtime 1x ./outbox/natspub
func BenchmarkRelayVsRaw(b *testing.B) {
	const (
		messages = 20000
		batch    = 100
		rounds   = 5
	)
	js := connect(b, natsURL, nats.ReconnectBufSize(-1))
	stream, prefix := newStream(b, js, jetstream.StreamConfig{Storage: jetstream.FileStorage})
	pool := pgstoretest.Pool(b, 8)
	schema := pgstoretest.Schema(b, pool)
	pub, err := natspub.New(js)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 200)
	ctx := context.Background()

	variants := []struct {
		name   string
		keys   int
		delete bool
	}{{"keys1000", 1000, false}, {"keys1000-delete", 1000, true}, {"keys10", 10, false}}
	for range b.N {
		for _, v := range variants {
			keys := v.keys
			var raws, relays, ratios, pubs []float64
			for round := range rounds {
				run := fmt.Sprintf("%s_r%d", strings.ReplaceAll(v.name, "-", "_"), round)
				msgs := make([]outbox.Message, messages)
				for i := range msgs {
					msgs[i] = outbox.Message{ID: run + "-" + strconv.Itoa(i), Destination: prefix + "." + run, Key: "key-" + strconv.Itoa(i%keys), Payload: payload}
				}
				raw := func() float64 { return rawRate(b, js, msgs, batch) }
				relay := func() float64 {
					return relayRate(b, ctx, pool, pub, outbox.RelayConfig{Table: schema + ".outbox_" + run, BatchSize: batch, DeleteSent: v.delete}, msgs)
				}
				var r, rl float64
				if round%2 == 0 {
					r, rl = raw(), relay()
				} else {
					rl, r = relay(), raw()
				}
				raws, relays, ratios = append(raws, r), append(relays, rl), append(ratios, rl/r)
				if keys == 1000 && !v.delete {
					pubs = append(pubs, publisherRate(b, pub, msgs, batch)/r)
				}
				if err := purge(ctx, js, stream); err != nil { // keep the stream small
					b.Fatal(err)
				}
			}
			b.ReportMetric(median(raws), "raw-"+v.name+"-msg/s")
			b.ReportMetric(median(relays), "relay-"+v.name+"-msg/s")
			b.ReportMetric(median(ratios), "relay÷raw-"+v.name)
			if len(pubs) > 0 {
				b.ReportMetric(median(pubs), "natspub÷raw-"+v.name)
			}
		}
	}
}

// rawRate publishes msgs batch by batch, as fast as JetStream acks them,
// with IDs of their own (so that the relay's copies are not duplicates),
// and returns messages per second.
func rawRate(b *testing.B, js jetstream.JetStream, msgs []outbox.Message, batch int) float64 {
	start := time.Now()
	futures := make([]jetstream.PubAckFuture, 0, batch)
	for chunk := range slices.Chunk(msgs, batch) {
		futures = futures[:0]
		for _, m := range chunk {
			f, err := js.PublishMsgAsync(&nats.Msg{Subject: m.Destination, Data: m.Payload}, jetstream.WithMsgID("raw-"+m.ID), jetstream.WithRetryAttempts(0))
			if err != nil {
				b.Fatal(err)
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
	}
	return float64(len(msgs)) / time.Since(start).Seconds()
}

// publisherRate publishes msgs with pub, batch by batch, without a relay
// or a database, with IDs of their own, and returns messages per second.
func publisherRate(b *testing.B, pub outbox.Publisher, msgs []outbox.Message, batch int) float64 {
	own := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		m.ID = "pub-" + m.ID
		own[i] = m
	}
	start := time.Now()
	for chunk := range slices.Chunk(own, batch) {
		if err := pub.Publish(context.Background(), chunk); err != nil {
			b.Fatal(err)
		}
	}
	return float64(len(own)) / time.Since(start).Seconds()
}

// relayRate enqueues msgs into a new outbox table (not timed), then runs a
// relay over it until every message was published, and returns messages
// per second.
func relayRate(b *testing.B, ctx context.Context, pool *pgxpool.Pool, pub outbox.Publisher, cfg outbox.RelayConfig, msgs []outbox.Message) float64 {
	if err := outbox.Migrate(ctx, pool, cfg.Table); err != nil {
		b.Fatal(err)
	}
	ob, err := outbox.New(outbox.Config{Table: cfg.Table, NoNotify: true})
	if err != nil {
		b.Fatal(err)
	}
	for chunk := range slices.Chunk(msgs, 1000) {
		if err := ob.Enqueue(ctx, pool, chunk...); err != nil {
			b.Fatal(err)
		}
	}
	var sent atomic.Int64
	var once sync.Once
	done := make(chan struct{})
	cfg.Observer = func(_ context.Context, e outbox.Event) {
		if e.Op == outbox.OpPublish && sent.Add(int64(e.Sent)) >= int64(len(msgs)) {
			once.Do(func() { close(done) })
		}
	}
	relay, err := outbox.NewRelay(pool, pub, cfg)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	ran := make(chan error, 1)
	go func() { ran <- relay.Run(ctx) }()
	<-done
	elapsed := time.Since(start)
	relay.Close()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	return float64(len(msgs)) / elapsed.Seconds()
}

func purge(ctx context.Context, js jetstream.JetStream, stream string) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	return s.Purge(ctx)
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
