// Package kafkatest holds what the tests and benchmarks of idemkafka and
// kafkapg share: the Apache Kafka of the tests (IDEM_KAFKA_BROKERS) and
// topics of a test's own on it, a producer, the clients' options, and a
// wait on a condition.
package kafkatest

import (
	"context"
	"crypto/rand"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem/idemkafka/internal/consume"
	"github.com/idemgo/idem/internal/testenv"
)

// Cluster is the Apache Kafka of the tests (IDEM_KAFKA_BROKERS) as one
// test sees it: its topics and groups carry a prefix of the test's own
// (see [Cluster.Name]), so that tests sharing the broker, and runs of one
// test, never meet.
type Cluster struct {
	tb     testing.TB
	addrs  []string
	prefix string
	admin  *kgo.Client
}

// NewCluster returns the tests' broker with the topics given (name →
// partitions) created for tb under [Cluster.Name], and deleted when tb
// ends. It skips tb when the broker is unreachable, or fails it under
// IDEM_REQUIRE_SERVICES=1.
func NewCluster(tb testing.TB, topics map[string]int32) *Cluster {
	tb.Helper()
	addrs := Brokers(tb)
	c := &Cluster{tb: tb, addrs: addrs, prefix: TopicName(tb), admin: AdminClient(tb, addrs)}
	for name, n := range topics {
		CreateTopics(tb, addrs, n, c.Name(name))
	}
	return c
}

// Name returns the test's own name of a topic or group.
func (c *Cluster) Name(s string) string { return c.prefix + "." + s }

// ListenAddrs returns the seed brokers.
func (c *Cluster) ListenAddrs() []string { return c.addrs }

// EndOffsets returns each partition's end offset of topic.
func (c *Cluster) EndOffsets(topic string) map[int32]int64 {
	c.tb.Helper()
	return EndOffsets(c.tb, c.admin, topic)
}

// Committed returns the offsets group committed on topic, by partition.
func (c *Cluster) Committed(group, topic string) map[int32]int64 {
	c.tb.Helper()
	return Committed(c.tb, c.admin, group, topic)
}

// FetchCommitted returns the offsets group committed on topic, by
// partition, or the request's error: unlike [Cluster.Committed] it may be
// called off the test's goroutine (in a consumer's observer, say).
func (c *Cluster) FetchCommitted(ctx context.Context, group, topic string) (map[int32]int64, error) {
	return FetchCommitted(ctx, c.admin, group, topic)
}

// WaitGroupStable waits until group is stable with members members.
func (c *Cluster) WaitGroupStable(ctx context.Context, group string, members int) error {
	return WaitGroupStable(ctx, c.admin, group, members)
}

// Brokers returns the seed brokers of the Apache Kafka the tests use,
// IDEM_KAFKA_BROKERS (default 127.0.0.1:9092, as scripts/services.sh
// starts it). It skips tb when no broker answers, or fails it under
// IDEM_REQUIRE_SERVICES=1.
func Brokers(tb testing.TB) []string {
	tb.Helper()
	return testenv.KafkaBrokers(tb)
}

var unsafeTopicChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// TopicName returns a topic name of tb's own: the test's name and a random
// suffix, so that tests sharing a broker, and runs of one test, never meet.
func TopicName(tb testing.TB) string {
	name := unsafeTopicChars.ReplaceAllString(tb.Name(), "_")
	if len(name) > 180 {
		name = name[len(name)-180:]
	}
	return "idemtest." + name + "." + rand.Text()[:10]
}

// CreateTopics creates the topics named, each with partitions partitions
// and one replica, and deletes them when tb ends.
func CreateTopics(tb testing.TB, brokers []string, partitions int32, names ...string) {
	tb.Helper()
	createTopics(tb, brokers, partitions, nil, names)
}

// TopicWithConfig is [Topic] with the topic configuration configs
// (max.message.bytes, say).
func TopicWithConfig(tb testing.TB, brokers []string, partitions int32, configs map[string]string) string {
	tb.Helper()
	name := TopicName(tb)
	createTopics(tb, brokers, partitions, configs, []string{name})
	return name
}

func createTopics(tb testing.TB, brokers []string, partitions int32, configs map[string]string, names []string) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), GroupTimeout)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	for _, name := range names {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = name, partitions, 1
		for k, v := range configs {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name, c.Value = k, kmsg.StringPtr(v)
			t.Configs = append(t.Configs, c)
		}
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		tb.Fatalf("create topics %v: %v", names, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			tb.Fatalf("create topic %s: %v", t.Topic, err)
		}
	}
	tb.Cleanup(func() { deleteTopics(tb, brokers, names) })
	if err := awaitTopics(ctx, cl, partitions, names); err != nil {
		tb.Fatal(err)
	}
}

// awaitTopics waits until the broker's metadata has every topic named with
// partitions partitions, each with a leader: a client that asks before
// then is told the topic is unknown and, by franz-go's default, waits out
// its metadata's minimum age (5 s) before it asks again.
func awaitTopics(ctx context.Context, cl *kgo.Client, partitions int32, names []string) error {
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range names {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, t)
	}
	var last error
	for {
		resp, err := req.RequestWith(ctx, cl)
		if last = err; err == nil {
			last = topicsReady(resp, partitions, len(names))
		}
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v not ready: %w (last: %v)", names, ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// topicsReady says why the metadata in resp does not yet show n topics of
// partitions partitions, each partition with a leader; nil once it does.
func topicsReady(resp *kmsg.MetadataResponse, partitions int32, n int) error {
	if len(resp.Topics) != n {
		return fmt.Errorf("%d topics in the metadata, want %d", len(resp.Topics), n)
	}
	for _, t := range resp.Topics {
		name := kmsg.StringPtr("?")
		if t.Topic != nil {
			name = t.Topic
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Errorf("topic %s: %w", *name, err)
		}
		if len(t.Partitions) != int(partitions) {
			return fmt.Errorf("topic %s: %d partitions, want %d", *name, len(t.Partitions), partitions)
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil || p.Leader < 0 {
				return fmt.Errorf("topic %s partition %d: leader %d, %v", *name, p.Partition, p.Leader, err)
			}
		}
	}
	return nil
}

// deleteTopics deletes the topics named, logging what fails: a topic left
// behind costs the shared broker a little disk, not a test.
func deleteTopics(tb testing.TB, brokers, names []string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Logf("delete topics %v: %v", names, err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 30000
	for _, name := range names {
		t := kmsg.NewDeleteTopicsRequestTopic()
		t.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		tb.Logf("delete topics %v: %v", names, err)
		return
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && t.Topic != nil {
			tb.Logf("delete topic %s: %v", *t.Topic, err)
		}
	}
}

// DeleteTopics deletes the topics named now, as a test's cleanup does,
// logging what fails.
func DeleteTopics(tb testing.TB, brokers []string, names ...string) { deleteTopics(tb, brokers, names) }

// Topic creates a topic of tb's own with partitions partitions on brokers
// (see [TopicName], [CreateTopics]) and returns its name.
func Topic(tb testing.TB, brokers []string, partitions int32) string {
	tb.Helper()
	name := TopicName(tb)
	CreateTopics(tb, brokers, partitions, name)
	return name
}

// Group returns a consumer group name of tb's own.
func Group(tb testing.TB) string { return fmt.Sprintf("%s.group", TopicName(tb)) }

// GroupTimeout bounds a wait on consumer-group rebalances, which take
// seconds.
const GroupTimeout = 60 * time.Second

// Produce publishes recs on the partitions they name and waits for their
// acknowledgement.
func Produce(tb testing.TB, addrs []string, recs ...*kgo.Record) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		kgo.MetadataMinAge(metadataMinAge))
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
	for _, h := range r.Headers {
		if h.Key == consume.DefaultKeyHeader {
			return string(h.Value)
		}
	}
	return ""
}

// metadataMinAge is the test clients' least time between metadata
// refreshes: franz-go's default, 5 s, is what a client waits when its
// first look at a topic comes too early.
const metadataMinAge = 100 * time.Millisecond

// ClientOpts are the consuming test clients' options: quick fetches,
// metadata refreshes and rebalances, a session that ends 3s after a
// member dies.
func ClientOpts(addrs []string, group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.MetadataMinAge(metadataMinAge),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.HeartbeatInterval(200 * time.Millisecond),
		kgo.SessionTimeout(3 * time.Second),
		kgo.RebalanceTimeout(20 * time.Second),
	}
}

// Await waits until cond holds, checking every 10ms, and fails tb after
// timeout.
func Await(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	testenv.WaitFor(tb, timeout, what, cond)
}

// EndOffsets returns the end offset (high watermark) of each partition of
// topic, asked through cl (see [AdminClient]). It fails tb when the
// request fails.
func EndOffsets(tb testing.TB, cl *kgo.Client, topic string) map[int32]int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := FetchEndOffsets(ctx, cl, topic)
	if err != nil {
		tb.Fatal(err)
	}
	return ends
}

// FetchEndOffsets returns the end offset (high watermark) of each
// partition of topic, asked through cl. Unlike [EndOffsets] it only
// returns its error, so that it can be called off the test's goroutine
// (in a consumer's observer, say).
func FetchEndOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	if len(mresp.Topics) != 1 {
		return nil, fmt.Errorf("metadata of %s: %d topics in the answer", topic, len(mresp.Topics))
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for _, p := range mresp.Topics[0].Partitions {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp = p.Partition, -1 // latest
		lt.Partitions = append(lt.Partitions, lp)
	}
	req.Topics = append(req.Topics, lt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	ends := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("end offset of %s/%d: %w", topic, p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	return ends, nil
}

// Committed returns the offsets group committed for the partitions of
// topic; a partition without a commit is absent. It fails tb when the
// request fails; a group that does not exist yet has no commits.
func Committed(tb testing.TB, cl *kgo.Client, group, topic string) map[int32]int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := FetchCommitted(ctx, cl, group, topic)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// FetchCommitted is [Committed] returning its error rather than failing a
// test, for callers off the test's goroutine.
func FetchCommitted(ctx context.Context, cl *kgo.Client, group, topic string) (map[int32]int64, error) {
	ends, err := FetchEndOffsets(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	ot := kmsg.NewOffsetFetchRequestTopic()
	ot.Topic = topic
	for p := range ends {
		ot.Partitions = append(ot.Partitions, p)
	}
	req.Topics = append(req.Topics, ot)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("committed offset of %s on %s/%d: %w", group, topic, p.Partition, err)
			}
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}

// AdminClient returns a client of brokers for a test's admin requests
// (EndOffsets, Committed), closed when tb ends.
func AdminClient(tb testing.TB, brokers []string) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// WaitGroupStable waits until group is Stable with members members, as the
// broker describes it (a classic consumer group), or ctx ends.
func WaitGroupStable(ctx context.Context, cl *kgo.Client, group string, members int) error {
	for {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{group}
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && len(resp.Groups) == 1 {
			g := resp.Groups[0]
			if g.ErrorCode == 0 && g.State == "Stable" && len(g.Members) == members {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group %s not stable with %d members: %w (last: %v)", group, members, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
