package kafkapub_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/kafkapub"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newCluster starts an in-process Kafka (kfake) whose topics are created
// on first use with partitions partitions, closed when t ends.
func newCluster(t *testing.T, partitions int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(partitions))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation()}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// record is a consumed record and its partition.
type record struct {
	outboxtest.Received
	partition int32
}

// consume reads topic from the start onto the channel returned, until t
// ends.
func consume(t *testing.T, c *kfake.Cluster, topic string) <-chan record {
	t.Helper()
	cl := newClient(t, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan record, 10000)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				h := map[string]string{}
				id := ""
				for _, rh := range r.Headers {
					h[rh.Key] = string(rh.Value)
					if rh.Key == kafkapub.DefaultIDHeader {
						id = string(rh.Value)
					}
				}
				got <- record{outboxtest.Received{ID: id, Key: string(r.Key), Headers: h, Payload: r.Value}, r.Partition}
			})
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait(); close(got) })
	return got
}

func newPublisher(t *testing.T, cl *kgo.Client) *kafkapub.Publisher {
	t.Helper()
	pub, err := kafkapub.New(cl)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func TestPublisher(t *testing.T) {
	outboxtest.TestPublisher(t, func(t *testing.T) outboxtest.Broker {
		// One partition per topic: the suite reads a destination's
		// messages in the order they were published, across keys.
		c := newCluster(t, 1)
		return outboxtest.Broker{
			Publisher: newPublisher(t, newClient(t, c)),
			Keys:      true,
			Destination: func(t *testing.T) (string, <-chan outboxtest.Received) {
				topic := "outboxtest-" + outboxtest.NewRunID()
				recs := consume(t, c, topic)
				got := make(chan outboxtest.Received, cap(recs))
				go func() {
					for r := range recs {
						got <- r.Received
					}
				}()
				return topic, got
			},
		}
	})
}

// TestAKeyGoesToOnePartition: over a topic of 8 partitions, each key's
// records land in one partition, in order, and the keys spread.
func TestAKeyGoesToOnePartition(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 8)
	pub := newPublisher(t, newClient(t, c))
	topic := "outboxtest-" + outboxtest.NewRunID()
	msgs, want := outboxtest.Messages(400, 20, topic)
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer cancel()
	if err := pub.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	got := consume(t, c, topic)
	partitionOf := map[string]int32{}
	var ids []string
	for range msgs {
		select {
		case r := <-got:
			if p, ok := partitionOf[r.Key]; ok && p != r.partition {
				t.Errorf("key %s in partitions %d and %d", r.Key, p, r.partition)
			}
			partitionOf[r.Key] = r.partition
			ids = append(ids, r.ID)
		case <-ctx.Done():
			t.Fatalf("consumed %d of %d records", len(ids), len(msgs))
		}
	}
	outboxtest.CheckOrder(t, want, ids)
	used := map[int32]bool{}
	for _, p := range partitionOf {
		used[p] = true
	}
	if len(used) < 4 {
		t.Errorf("20 keys in %d of 8 partitions, want them spread", len(used))
	}
}

// TestRelayThroughBrokerOutages: the broker drops every produce request
// during two outages longer than the client's delivery timeout, while
// messages are enqueued before, during and after them; the relay backs off
// and gets every message into the topic, each key's in order.
func TestRelayThroughBrokerOutages(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4)
	var down atomic.Bool
	var dropped atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if down.Load() {
			dropped.Add(1)
			return nil, errors.New("outage"), true // closes the connection
		}
		return nil, nil, false
	})
	cl := newClient(t, c, kgo.MetadataMinAge(50*time.Millisecond), kgo.RecordDeliveryTimeout(time.Second), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))
	topic := "outboxtest-" + outboxtest.NewRunID()
	pool := pgstoretest.Pool(t, 8)
	table := outboxtest.Table(t, pool)
	var sent, failed atomic.Int64
	relay, err := outbox.NewRelay(pool, newPublisher(t, cl), outbox.RelayConfig{
		Table: table, BatchSize: 50, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		PublishTimeout: 300 * time.Millisecond,
		Observer: func(_ context.Context, e outbox.Event) {
			sent.Add(int64(e.Sent))
			failed.Add(int64(e.Failed))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RunRelay(t, relay)

	msgs, want := outboxtest.Messages(600, 12, topic)
	await := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(outboxtest.Timeout); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within %v", what, outboxtest.Timeout)
			}
		}
	}
	outboxtest.Enqueue(t, pool, table, msgs[:200], 6)
	await("100 sent", func() bool { return sent.Load() >= 100 })
	down.Store(true)
	outboxtest.Enqueue(t, pool, table, msgs[200:400], 6)
	await("a failed publish", func() bool { return failed.Load() > 0 })
	down.Store(false)
	await("more sent", func() bool { return sent.Load() >= 250 })
	down.Store(true)
	outboxtest.Enqueue(t, pool, table, msgs[400:], 6)
	before := failed.Load()
	await("another failed publish", func() bool { return failed.Load() > before })
	down.Store(false)
	outboxtest.AwaitPending(t, pool, table, 0)

	got := consume(t, c, topic)
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer cancel()
	var ids []string
	seen := map[string]bool{}
	for len(seen) < len(msgs) {
		select {
		case r := <-got:
			ids = append(ids, r.ID)
			seen[r.ID] = true
		case <-ctx.Done():
			t.Fatalf("consumed %d distinct of %d records", len(seen), len(msgs))
		}
	}
	dups := outboxtest.CheckOrder(t, want, ids)
	t.Logf("%d produce requests dropped, %d messages failed, %d duplicate records", dropped.Load(), failed.Load(), dups)
}

func TestNewRefusesAClientThatIsNotIdempotent(t *testing.T) {
	c := newCluster(t, 1)
	for _, opt := range []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.TransactionalID("tx")} {
		if _, err := kafkapub.New(newClient(t, c, opt)); err == nil || !strings.HasPrefix(err.Error(), "kafkapub: New:") {
			t.Errorf("New over a client with %v = %v, want an error", opt, err)
		}
	}
	if _, err := kafkapub.New(nil); err == nil {
		t.Error("New(nil) = nil error")
	}
	if _, err := kafkapub.New(newClient(t, c), kafkapub.WithIDHeader("")); err == nil {
		t.Error("WithIDHeader(\"\") accepted")
	}
}
