package outboxnats_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
// messages, a batch at a time, with PublishMsgAsync and Nats-Msg-Id, and
// waits for the batch's acks before the next. The relay does that plus
// reading each batch from PostgreSQL and marking it sent (one round trip
// for both, while the broker takes the batch before), and sends a batch in
// rounds of one message per key. Messages are spread over 1,000 keys (a
// batch holds as many keys as messages: one round), with sent rows marked
// or deleted (RelayConfig.DeleteSent), or over 10 keys (rounds of ten).
// "bare-relay" is the least a relay can do, the limit of any relay over
// this database and broker: a SELECT of the next pending rows in id order,
// their publication as raw does, then one UPDATE marking them sent (or a
// DELETE), batch after batch, with no partitions, no per-key rounds, no
// retries and no overlap of the database's work with the broker's. Each
// round measures raw, relay and bare-relay one after the other, alternating
// the order; the metrics are the medians of the rates, of each round's
// own relay ÷ raw ratio and, on Linux, of the CPU time per message of this
// process (go), of the nats-server processes (nats) and of the relay's
// PostgreSQL backend (pg) while each ran. Batches are of 100 messages,
// or 500 in the cases named so.
//
//	cd integration && go test -run '^$' -bench RelayVsRaw -benchtime 1x ./outboxnats
//	cd integration && go test -run '^$' -bench 'RelayVsRaw/keys1000$' -benchtime 1x ./outboxnats  # one case
func BenchmarkRelayVsRaw(b *testing.B) {
	const (
		messages = 20000
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
		batch  int
	}{
		{"keys1000", 1000, false, 100}, {"keys1000-delete", 1000, true, 100}, {"keys10", 10, false, 100},
		{"keys1000-batch500", 1000, false, 500}, {"keys1000-delete-batch500", 1000, true, 500},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			batch := v.batch
			for range b.N {
				var raws, relays, ratios, pubs, bares, bareRatios, overBare []float64
				var rawCPU, relayCPU [][3]float64
				for round := range rounds {
					run := fmt.Sprintf("%s_r%d", strings.ReplaceAll(v.name, "-", "_"), round)
					msgs := make([]outbox.Message, messages)
					for i := range msgs {
						msgs[i] = outbox.Message{ID: run + "-" + strconv.Itoa(i), Destination: prefix + "." + run, Key: "key-" + strconv.Itoa(i%v.keys), Payload: payload}
					}
					raw := func() float64 {
						before := cpuNow(0)
						r := rawRate(b, js, msgs, batch)
						rawCPU = append(rawCPU, perMessage(cpuNow(0).minus(before), messages))
						return r
					}
					relay := func() float64 {
						r, used := relayRate(b, ctx, pool, pub, outbox.RelayConfig{Table: schema + ".outbox_" + run, BatchSize: batch, DeleteSent: v.delete}, msgs)
						relayCPU = append(relayCPU, perMessage(used, messages))
						return r
					}
					bare := func() float64 {
						return bareRelayRate(b, ctx, pool, js, schema+".bare_"+run, v.delete, msgs, batch)
					}
					var r, rl, br float64
					if round%2 == 0 {
						r, rl, br = raw(), relay(), bare()
					} else {
						br, rl, r = bare(), relay(), raw()
					}
					raws, relays, ratios = append(raws, r), append(relays, rl), append(ratios, rl/r)
					bares, bareRatios, overBare = append(bares, br), append(bareRatios, br/r), append(overBare, rl/br)
					if v.keys == 1000 && !v.delete {
						pubs = append(pubs, publisherRate(b, pub, msgs, batch)/r)
					}
					if err := purge(ctx, js, stream); err != nil { // keep the stream small
						b.Fatal(err)
					}
				}
				b.ReportMetric(median(raws), "raw-msg/s")
				b.ReportMetric(median(relays), "relay-msg/s")
				b.ReportMetric(median(ratios), "relay÷raw")
				b.ReportMetric(median(bares), "bare-relay-msg/s")
				b.ReportMetric(median(bareRatios), "bare-relay÷raw")
				b.ReportMetric(median(overBare), "relay÷bare-relay")
				if len(pubs) > 0 {
					b.ReportMetric(median(pubs), "natspub÷raw")
				}
				if cpuAccounting {
					for i, who := range []string{"go", "nats", "pg"} {
						if i < 2 {
							b.ReportMetric(median(column(rawCPU, i)), "raw-"+who+"-cpu-µs/msg")
						}
						b.ReportMetric(median(column(relayCPU, i)), "relay-"+who+"-cpu-µs/msg")
					}
				}
			}
		})
	}
}

// cpuAccounting is whether /proc gives the CPU time of processes.
var cpuAccounting = func() bool { _, err := os.Stat("/proc/self/stat"); return err == nil }()

// cpuTime is CPU time in clock ticks (1/100 s on Linux) of this process,
// of the nats-server processes and of one PostgreSQL backend.
type cpuTime [3]int64

func (c cpuTime) minus(d cpuTime) cpuTime { return cpuTime{c[0] - d[0], c[1] - d[1], c[2] - d[2]} }

// cpuNow reads the CPU time used so far; backend is the PostgreSQL
// backend's pid, 0 for none.
func cpuNow(backend int) cpuTime {
	var c cpuTime
	if !cpuAccounting {
		return c
	}
	c[0], _ = procTicks(strconv.Itoa(os.Getpid()))
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if t, comm := procTicks(filepath.Base(d)); comm == "nats-server" {
			c[1] += t
		}
	}
	if backend != 0 {
		c[2], _ = procTicks(strconv.Itoa(backend))
	}
	return c
}

// procTicks returns the user and system time of process pid, and its name.
func procTicks(pid string) (int64, string) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, ""
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return 0, ""
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return 0, ""
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return utime + stime, s[open+1 : end]
}

// perMessage converts ticks to microseconds per message.
func perMessage(c cpuTime, n int) [3]float64 {
	var out [3]float64
	for i, t := range c {
		out[i] = float64(t) * 1e4 / float64(n)
	}
	return out
}

func column(rows [][3]float64, i int) []float64 {
	out := make([]float64, len(rows))
	for j, r := range rows {
		out[j] = r[i]
	}
	return out
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
// per second and the CPU time used meanwhile.
func relayRate(b *testing.B, ctx context.Context, pool *pgxpool.Pool, pub outbox.Publisher, cfg outbox.RelayConfig, msgs []outbox.Message) (float64, cpuTime) {
	if err := outbox.Migrate(ctx, pool, cfg.Table); err != nil {
		b.Fatal(err)
	}
	ob, err := outbox.New(outbox.Config{Table: cfg.Table})
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
	before := cpuNow(0) // the relay's backend starts with Run
	start := time.Now()
	ran := make(chan error, 1)
	go func() { ran <- relay.Run(ctx) }()
	<-done
	elapsed := time.Since(start)
	var backend int
	if err := pool.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = left($1, 63)", "outbox relay "+cfg.Table).Scan(&backend); err != nil {
		b.Fatal(err)
	}
	used := cpuNow(backend).minus(before)
	relay.Close()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	return float64(len(msgs)) / elapsed.Seconds(), used
}

// bareRelayRate enqueues msgs into a new outbox table (not timed), drains
// it as the least a relay does (see BenchmarkRelayVsRaw), with message IDs
// of its own, and returns messages per second.
func bareRelayRate(b *testing.B, ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, table string, deleteSent bool, msgs []outbox.Message, batch int) float64 {
	if err := outbox.Migrate(ctx, pool, table); err != nil {
		b.Fatal(err)
	}
	ob, err := outbox.New(outbox.Config{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	for chunk := range slices.Chunk(msgs, 1000) {
		if err := ob.Enqueue(ctx, pool, chunk...); err != nil {
			b.Fatal(err)
		}
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	read := "SELECT id, message_id, destination, payload FROM " + table + " WHERE sent_at IS NULL ORDER BY id LIMIT $1"
	mark := "UPDATE " + table + " SET sent_at = statement_timestamp() WHERE id = ANY($1)"
	if deleteSent {
		mark = "DELETE FROM " + table + " WHERE id = ANY($1)"
	}
	ids := make([]int64, 0, batch)
	futures := make([]jetstream.PubAckFuture, 0, batch)
	start := time.Now()
	for sent := 0; sent < len(msgs); sent += len(ids) {
		ids, futures = ids[:0], futures[:0]
		rows, err := conn.Query(ctx, read, batch)
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var messageID, destination string
			var payload []byte
			if err := rows.Scan(&id, &messageID, &destination, &payload); err != nil {
				b.Fatal(err)
			}
			f, err := js.PublishMsgAsync(&nats.Msg{Subject: destination, Data: payload}, jetstream.WithMsgID("bare-"+messageID), jetstream.WithRetryAttempts(0))
			if err != nil {
				b.Fatal(err)
			}
			ids, futures = append(ids, id), append(futures, f)
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		if len(ids) == 0 {
			b.Fatalf("%s: no pending row after %d of %d messages", table, sent, len(msgs))
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		if _, err := conn.Exec(ctx, mark, ids); err != nil {
			b.Fatal(err)
		}
	}
	return float64(len(msgs)) / time.Since(start).Seconds()
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
