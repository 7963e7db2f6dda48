package otelconsumers_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/internal/testenv"
)

// A Kafka consumer's batches become idemotel's consumer metrics, with the
// topic, the group given to ConsumerObserver and the partition as
// attributes, the partition's lag as the broker's high watermark tells it,
// and the partition's lag series gone once the consumer gives the
// partition up.
func TestKafkaConsumerMetrics(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	b := make([]byte, 6)
	rand.Read(b)
	topic, group := "idemotel-"+hex.EncodeToString(b), "idemotel-billing-"+hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	t.Cleanup(func() { // after the consumer stopped
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.TimeoutMillis = 30000
		dt := kmsg.NewDeleteTopicsRequestTopic()
		dt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, dt)
		if _, err := req.RequestWith(context.Background(), producer); err != nil {
			t.Logf("delete topic %s: %v", topic, err)
		}
	})
	const records = 12
	for i := range records {
		key := "order-" + strconv.Itoa(i%10) // orders 0 and 1 twice: duplicates
		r := &kgo.Record{Topic: topic, Value: []byte("order"), Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(key)}}}
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	tel := newTelemetry(t)
	g := newGuard(t, tel, "billing")
	var seen activities
	metrics := idemotel.ConsumerObserver[idemkafka.Event](tel.Telemetry, group)
	c, err := idemkafka.New(g, func(context.Context, *kgo.Record) error { return nil },
		idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(),
		idemkafka.WithMaxBatch(1), // one record a batch: each batch reports the lag behind it
		idemkafka.WithObserver(func(ctx context.Context, e idemkafka.Event) {
			metrics(ctx, e)
			seen.add(e.Activity())
		}))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, c.ClientOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx, cl) }()
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			stop()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			cl.Close()
		}
	}
	t.Cleanup(halt)
	testenv.WaitFor(t, 60*time.Second, "every record finished", func() bool { return seen.count(consumer.ActivityProcessed) == records })

	base := []string{"messaging.system=kafka", "messaging.destination.name=" + topic, "messaging.consumer.group.name=" + group}
	with := func(kv ...string) string { return attrs(append(kv, base...)...) }
	partition0 := with("messaging.destination.partition.id=0")
	got := tel.metrics(t)
	for _, c := range []struct {
		metric, attrs string
		want          int64
	}{
		{"idem.consumer.messages", with("idem.consumer.outcome=processed"), 10},
		{"idem.consumer.messages", with("idem.consumer.outcome=replayed"), 2},
		{"idem.consumer.lag", partition0, 0}, // every record finished
		{"idem.claims", attrs("idem.namespace=billing", "idem.outcome=acquired"), 10},
	} {
		if v, ok := got[c.metric][c.attrs]; !ok || v != c.want {
			t.Errorf("%s{%s} = %d (found %t), want %d; all: %v", c.metric, c.attrs, v, ok, c.want, got[c.metric])
		}
	}
	if seen.maxLag < records/2 {
		t.Errorf("the largest lag reported is %d; the first batch had %d records behind it", seen.maxLag, records-1)
	}

	halt() // the consumer leaves the group: partition 0 is no longer its to report
	if seen.count(consumer.ActivityReleased) == 0 {
		t.Error("the consumer reported no revocation as it left the group")
	}
	if lag := tel.metrics(t)["idem.consumer.lag"]; len(lag) != 0 {
		t.Errorf("idem.consumer.lag after the consumer left: %v, want no series", lag)
	}
}
