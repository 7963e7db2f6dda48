// Package kafkatest holds what the tests and benchmarks of idemkafka and
// kafkapg share: an in-process kfake cluster, a producer, the clients'
// options, and a wait on a condition.
package kafkatest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/idemkafka/internal/consume"
)

// GroupTimeout bounds a wait on consumer-group rebalances, which take
// seconds on kfake.
const GroupTimeout = 60 * time.Second

// NewCluster starts an in-process Kafka cluster of one broker that
// accepts session timeouts from a second, closed when tb ends.
func NewCluster(tb testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.GroupMinSessionTimeout(time.Second)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Produce publishes recs on the partitions they name and waits for their
// acknowledgement.
func Produce(tb testing.TB, addrs []string, recs ...*kgo.Record) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), GroupTimeout)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		tb.Fatal(err)
	}
}

// Keyed returns a record for a partition of topic with the idempotency
// key header.
func Keyed(topic string, partition int32, key, value string) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: partition, Value: []byte(value),
		Headers: []kgo.RecordHeader{{Key: consume.DefaultKeyHeader, Value: []byte(key)}}}
}

// HeaderKey returns the record's idempotency key header ("" if none).
func HeaderKey(r *kgo.Record) string {
	k, _ := consume.KeyFromHeaders(r.Headers, consume.DefaultKeyHeader)
	return k
}

// ClientOpts are the consuming test clients' options: quick fetches and
// rebalances, a session that ends 3s after a member dies.
func ClientOpts(addrs []string, group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.HeartbeatInterval(200 * time.Millisecond),
		kgo.SessionTimeout(3 * time.Second),
		kgo.RebalanceTimeout(20 * time.Second),
	}
}

// Await waits until cond holds, checking every 20ms, and fails tb after
// timeout.
func Await(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
