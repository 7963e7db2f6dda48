package outboxkafka_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/kafkapub"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newCluster starts an in-process Kafka (kfake) whose topics are created
// on first use with partitions partitions, closed when t ends. It is for
// the tests that need what only a fake broker does (dropping produce
// requests on demand) or no broker at all; the others run against Apache
// Kafka (see sharedBrokers).
func newCluster(t *testing.T, partitions int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(partitions))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// sharedBrokers returns the Apache Kafka of the tests (IDEM_KAFKA_BROKERS),
// skipping t, or failing it under IDEM_REQUIRE_SERVICES=1, when none
// answers.
func sharedBrokers(t *testing.T) []string {
	t.Helper()
	return testenv.KafkaBrokers(t)
}

// topicName returns a topic name of t's own: the test's name and a random
// suffix, so that tests sharing a broker, and runs of one test, never meet.
func topicName(t *testing.T) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 180 {
		name = name[len(name)-180:]
	}
	return "idemtest." + name + "." + rand.Text()[:10]
}

// topic creates a topic of t's own with partitions partitions and one
// replica on brokers, deleted when t ends, and returns its name.
func topic(t *testing.T, brokers []string, partitions int32) string {
	t.Helper()
	name := topicName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := topicRequest(ctx, brokers, name, partitions, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A topic left behind costs the broker a little disk, not a test.
		if err := topicRequest(ctx, brokers, name, 0, false); err != nil {
			t.Log(err)
		}
	})
	return name
}

// topicRequest creates (with partitions partitions) or deletes topic.
func topicRequest(ctx context.Context, brokers []string, topic string, partitions int32, create bool) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	if create {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 30000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
		}
		if err != nil {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
		return nil
	}
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("delete topic %s: %w", topic, err)
	}
	return nil
}

func newClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
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
func consume(t *testing.T, brokers []string, topic string) <-chan record {
	t.Helper()
	cl := newClient(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
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

// consumeIDs collects the ids of the records from got until n distinct
// ones have come, in the order they came, duplicates included; it fails
// the test when they have not within outboxtest.Timeout.
func consumeIDs(t *testing.T, got <-chan record, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer cancel()
	var ids []string
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case r := <-got:
			ids = append(ids, r.ID)
			seen[r.ID] = true
		case <-ctx.Done():
			t.Fatalf("consumed %d distinct of %d records", len(seen), n)
		}
	}
	return ids
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
		brokers := sharedBrokers(t)
		return outboxtest.Broker{
			Publisher: newPublisher(t, newClient(t, brokers)),
			Keys:      true,
			Destination: func(t *testing.T) (string, <-chan outboxtest.Received) {
				// One partition: the suite reads a destination's messages
				// in the order they were published, across keys.
				topic := topic(t, brokers, 1)
				recs := consume(t, brokers, topic)
				got := make(chan outboxtest.Received, cap(recs))
				go func() {
					for r := range recs {
						got <- r.Received
					}
				}()
				return topic, got
			},
			Poisons: []outboxtest.Poison{{Name: "InvalidTopic", Message: func(dest string) outbox.Message {
				return outbox.Message{Destination: dest + " x", Payload: []byte("poison")}
			}, Err: "INVALID_TOPIC_EXCEPTION"}},
		}
	})
}

// TestAKeyGoesToOnePartition: over a topic of 8 partitions, each key's
// records land in one partition, in order, and the keys spread.
func TestAKeyGoesToOnePartition(t *testing.T) {
	t.Parallel()
	brokers := sharedBrokers(t)
	pub := newPublisher(t, newClient(t, brokers))
	topic := topic(t, brokers, 8)
	msgs, want := outboxtest.Messages(400, 20, topic)
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer cancel()
	if err := pub.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	got := consume(t, brokers, topic)
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
// and gets every message into the topic, each key's in order, and no row
// died of the outages, though MaxAttempts is 2: a broker that cannot be
// reached counts no attempt.
//
// It runs on kfake, whose ControlKey drops exactly the produce requests,
// at once and for as long as the test wants: a quick unit test of the
// relay's back-off and of Publish's hand-over of records still in flight.
// TestRelayThroughABrokerCrash crashes an Apache Kafka broker instead.
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
	cl := newClient(t, c.ListenAddrs(), kgo.AllowAutoTopicCreation(), kgo.MetadataMinAge(50*time.Millisecond), kgo.RecordDeliveryTimeout(time.Second), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))
	topic := "outboxtest-" + outboxtest.NewRunID()
	pool := pgstoretest.Pool(t, 8)
	table := outboxtest.Table(t, pool)
	var sent, failed, failedCalls atomic.Int64
	relay, err := outbox.NewRelay(pool, newPublisher(t, cl), outbox.RelayConfig{
		Table: table, BatchSize: 50, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		PublishTimeout: 300 * time.Millisecond, MaxAttempts: 2,
		Observer: func(_ context.Context, e outbox.Event) {
			sent.Add(int64(e.Sent))
			failed.Add(int64(e.Failed))
			if e.Op == outbox.OpPublish && e.Failed > 0 {
				failedCalls.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RunRelay(t, relay)

	msgs, want := outboxtest.Messages(600, 12, topic)
	outboxtest.Enqueue(t, pool, table, msgs[:200], 6)
	testenv.WaitFor(t, outboxtest.Timeout, "100 sent", func() bool { return sent.Load() >= 100 })
	// Each outage lasts several failed publishes: more than MaxAttempts
	// would allow, were they counted.
	down.Store(true)
	outboxtest.Enqueue(t, pool, table, msgs[200:400], 6)
	testenv.WaitFor(t, outboxtest.Timeout, "4 failed publishes", func() bool { return failedCalls.Load() >= 4 })
	down.Store(false)
	testenv.WaitFor(t, outboxtest.Timeout, "more sent", func() bool { return sent.Load() >= 250 })
	down.Store(true)
	outboxtest.Enqueue(t, pool, table, msgs[400:], 6)
	before := failedCalls.Load()
	testenv.WaitFor(t, outboxtest.Timeout, "4 more failed publishes", func() bool { return failedCalls.Load() >= before+4 })
	down.Store(false)
	outboxtest.AwaitPending(t, pool, table, 0)
	noDeadRows(t, pool, table)

	ids := consumeIDs(t, consume(t, c.ListenAddrs(), topic), len(msgs))
	dups := outboxtest.CheckOrder(t, want, ids)
	t.Logf("%d produce requests dropped, %d messages failed, %d duplicate records", dropped.Load(), failed.Load(), dups)
}

func TestNewRefusesAClientThatIsNotIdempotent(t *testing.T) {
	c := newCluster(t, 1)
	for _, opt := range []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.TransactionalID("tx")} {
		if _, err := kafkapub.New(newClient(t, c.ListenAddrs(), opt)); err == nil || !strings.HasPrefix(err.Error(), "kafkapub: New:") {
			t.Errorf("New over a client with %v = %v, want an error", opt, err)
		}
	}
	if _, err := kafkapub.New(nil); err == nil {
		t.Error("New(nil) = nil error")
	}
	if _, err := kafkapub.New(newClient(t, c.ListenAddrs()), kafkapub.WithIDHeader("")); err == nil {
		t.Error("WithIDHeader(\"\") accepted")
	}
}

// TestRelayThroughABrokerCrash: an Apache Kafka broker of the test's own
// is killed (SIGKILL) while the relay produces to it and messages are
// enqueued, stays down while more are, and comes back on the same ports
// and data. The relay gets every message into the topic, each key's in
// order, and no row died of the crash, though MaxAttempts is 2.
func TestRelayThroughABrokerCrash(t *testing.T) {
	t.Parallel()
	node := startKafkaNode(t)
	brokers := []string{node.addr}
	topic := topic(t, brokers, 4)
	cl := newClient(t, brokers, kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	pool := pgstoretest.Pool(t, 8)
	table := outboxtest.Table(t, pool)
	var sent, failed atomic.Int64
	relay, err := outbox.NewRelay(pool, newPublisher(t, cl), outbox.RelayConfig{
		Table: table, BatchSize: 50, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		PublishTimeout: time.Second, MaxAttempts: 2,
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
	// The crash lands while the writers enqueue and the relay produces.
	enqueued := make(chan testenv.Ending, 1)
	go func() {
		enqueued <- testenv.Record(t, func(tb testing.TB) { outboxtest.Enqueue(tb, pool, table, msgs[:300], 6) })
	}()
	testenv.WaitFor(t, outboxtest.Timeout, "50 sent", func() bool { return sent.Load() >= 50 })
	node.kill()
	if end := <-enqueued; end.Fatal != "" || len(end.Errors) > 0 {
		t.Fatalf("enqueue: %s %q", end.Fatal, end.Errors)
	}
	sentAtCrash := sent.Load()
	outboxtest.Enqueue(t, pool, table, msgs[300:450], 6)
	testenv.WaitFor(t, outboxtest.Timeout, "a failed publish", func() bool { return failed.Load() > 0 })
	node.start()
	outboxtest.Enqueue(t, pool, table, msgs[450:], 6)
	outboxtest.AwaitPending(t, pool, table, 0)
	noDeadRows(t, pool, table)

	ids := consumeIDs(t, consume(t, brokers, topic), len(msgs))
	dups := outboxtest.CheckOrder(t, want, ids)
	t.Logf("%d messages sent before the crash, %d failed, %d duplicate records", sentAtCrash, failed.Load(), dups)
}

// noDeadRows fails t if table has dead rows.
func noDeadRows(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer cancel()
	dead, err := outbox.Dead(ctx, pool, table, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		t.Errorf("dead row %s after %d attempts: %s", d.Message.ID, d.Attempts, d.LastError)
	}
}
