package kafkatest_test

import (
	"testing"

	"github.com/idemgo/idem/idemkafka/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestTopicOnApacheKafka(t *testing.T) {
	b := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, b, 3)
	kafkatest.Produce(t, b, kafkatest.Keyed(topic, 2, "k", "v"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(b...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	fs := cl.PollFetches(t.Context())
	if fs.NumRecords() != 1 || fs.Records()[0].Partition != 2 {
		t.Fatalf("got %d records", fs.NumRecords())
	}
}
