package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/internal/testenv"
)

// kafkaTopic creates a topic of t's own (a random suffix after prefix)
// with partitions partitions and one replica on brokers, deleted when t
// ends, and returns its name.
func kafkaTopic(t *testing.T, brokers []string, prefix string, partitions int32) string {
	t.Helper()
	name := prefix + "." + rand.Text()[:10]
	kafkaTopicNamed(t, brokers, name, partitions)
	return name
}

// topicRequest creates (with partitions partitions) or deletes topic.
func topicRequest(ctx context.Context, brokers []string, topic string, partitions int32, create bool) error {
	if create {
		created, err := createTopic(ctx, brokers, topic, partitions)
		if err == nil && !created {
			err = fmt.Errorf("create topic %s: %w", topic, kerr.TopicAlreadyExists)
		}
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
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

// The finding of a hostile-input review, on Apache Kafka: 20 good orders,
// one record of 999,000 bytes that is not an event, 20 good orders, on one
// partition. Every good order is charged once, the poison goes to the
// dead-letter topic without its value (its size and SHA-256 recorded) and
// the consumer says so.
func TestPoisonNearTheSizeLimitDoesNotStopThePartition(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := kafkaTopic(t, brokers, "idemtest.payments.poison", 1)
	kafkaTopicNamed(t, brokers, deadLetterTopic(topic), 1)
	var recs []*kgo.Record
	order := func(i int) *kgo.Record {
		e := OrderCreated{OrderID: fmt.Sprintf("order-%04d", i), Customer: "cus_001", AmountCents: 1000 + i}
		body, _ := json.Marshal(e)
		return &kgo.Record{Topic: topic, Value: body, Headers: []kgo.RecordHeader{{Key: idemkafka.DefaultKeyHeader, Value: []byte(e.OrderID)}}}
	}
	for i := 1; i <= 20; i++ {
		recs = append(recs, order(i))
	}
	poison := make([]byte, 999_000)
	rand.Read(poison) // does not compress: the record is that large on the wire
	recs = append(recs, &kgo.Record{Topic: topic, Value: poison, Headers: []kgo.RecordHeader{{Key: idemkafka.DefaultKeyHeader, Value: []byte("order-poison")}}})
	for i := 21; i <= 40; i++ {
		recs = append(recs, order(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := produceFor(t, ctx, brokers, topic, recs)
	var out bytes.Buffer
	p := newProvider(&out)
	finished, err := consumeOrders(ctx, brokers, o, io.Discard, p, len(recs))
	if err != nil {
		t.Fatal(err)
	}
	if charged, double := p.summary(40); finished != int64(len(recs)) || charged != 40 || double != 0 {
		t.Fatalf("%d records finished, %d orders charged, %d double charges; want %d, 40, 0\n%s", finished, charged, double, len(recs), &out)
	}
	if !strings.Contains(out.String(), "dead-lettered the record at "+topic+"/0 offset 20") {
		t.Fatalf("the output does not tell of the dead letter:\n%s", &out)
	}
	dl := readOne(t, ctx, brokers, deadLetterTopic(topic))
	sum := sha256.Sum256(poison)
	headers := map[string]string{}
	for _, h := range dl.Headers {
		headers[h.Key] = string(h.Value)
	}
	switch {
	case len(dl.Value) != 0:
		t.Fatalf("the dead letter carries a value of %d bytes: it does not fit beside its headers", len(dl.Value))
	case headers[consumer.HeaderBodySize] != "999000" || headers[consumer.HeaderBodySHA256] != hex.EncodeToString(sum[:]):
		t.Fatalf("the dead letter's body size %q and SHA-256 %q, want 999000 and the poison's", headers[consumer.HeaderBodySize], headers[consumer.HeaderBodySHA256])
	case headers[consumer.HeaderReason] != string(consumer.ReasonPermanent) || headers[consumer.HeaderKey] != "order-poison":
		t.Fatalf("the dead letter's reason %q and key %q, want permanent and order-poison", headers[consumer.HeaderReason], headers[consumer.HeaderKey])
	}
}

// produceFor produces recs and returns the options of a consumer of topic
// on brokers, in a group of its own.
func produceFor(t *testing.T, ctx context.Context, brokers []string, topic string, recs []*kgo.Record) options {
	t.Helper()
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--brokers", strings.Join(brokers, ","), "--topic", topic, "--group", topic + ".group"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// kafkaTopicNamed creates the topic name with partitions partitions and
// one replica on brokers, deleted when t ends.
func kafkaTopicNamed(t *testing.T, brokers []string, name string, partitions int32) {
	t.Helper()
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
}

// readOne returns the first record of topic's partition 0.
func readOne(t *testing.T, ctx context.Context, brokers []string, topic string) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no record on %s", topic)
		}
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
}

// The finding of a hostile-input review, on Apache Kafka: a fresh topic
// whose dead-letter topic nobody created, with a record that is not an
// event between good orders on one partition. The example creates its
// dead-letter topic, so the poison is dead-lettered and every good order
// charged; before, the partition waited on the poison's refused dead
// letter, and nothing was printed.
func TestFreshTopicDeadLettersItsPoison(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := kafkaTopic(t, brokers, "idemtest.payments.fresh", 1)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topicRequest(ctx, brokers, deadLetterTopic(topic), 0, false); err != nil {
			t.Log(err)
		}
	})
	var recs []*kgo.Record
	for i := 1; i <= 10; i++ {
		if i == 6 {
			recs = append(recs, &kgo.Record{Topic: topic, Value: []byte("not an event"),
				Headers: []kgo.RecordHeader{{Key: idemkafka.DefaultKeyHeader, Value: []byte("order-poison")}}})
		}
		e := OrderCreated{OrderID: fmt.Sprintf("order-%04d", i), Customer: "cus_001", AmountCents: 1000 + i}
		body, _ := json.Marshal(e)
		recs = append(recs, &kgo.Record{Topic: topic, Value: body, Headers: []kgo.RecordHeader{{Key: idemkafka.DefaultKeyHeader, Value: []byte(e.OrderID)}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := produceFor(t, ctx, brokers, topic, recs)
	var out, logs bytes.Buffer
	p := newProvider(&out)
	finished, err := consumeOrders(ctx, brokers, o, &logs, p, len(recs))
	if err != nil {
		t.Fatalf("%v\n%s%s", err, &logs, &out)
	}
	if charged, double := p.summary(10); finished != int64(len(recs)) || charged != 10 || double != 0 {
		t.Fatalf("%d records finished, %d orders charged, %d double charges; want %d, 10, 0\n%s%s", finished, charged, double, len(recs), &logs, &out)
	}
	if !strings.Contains(logs.String(), "created the dead-letter topic "+deadLetterTopic(topic)) ||
		!strings.Contains(out.String(), "dead-lettered the record at "+topic+"/0 offset 5") {
		t.Fatalf("the output does not tell of the dead-letter topic created and the dead letter:\n%s%s", &logs, &out)
	}
	if dl := readOne(t, ctx, brokers, deadLetterTopic(topic)); string(dl.Value) != "not an event" {
		t.Fatalf("the dead letter holds %q, want the poison", dl.Value)
	}
}
