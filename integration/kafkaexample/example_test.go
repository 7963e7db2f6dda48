package kafkaexample_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/memstore"
)

// A payments consumer charges once per order, though the producer
// published one of the orders twice. The cluster is an in-process kfake
// one; a real one is used the same way.
func Example() {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	order := func(id string) *kgo.Record {
		return &kgo.Record{Topic: "orders", Value: []byte(`{"order":"` + id + `"}`),
			Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(id)}}}
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		log.Fatal(err)
	}
	if err := producer.ProduceSync(context.Background(), order("o-1"), order("o-2"), order("o-1")).FirstErr(); err != nil {
		log.Fatal(err)
	}
	producer.Close()

	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	guard, err := idem.New(store, idem.Config{Namespace: "payments"})
	if err != nil {
		log.Fatal(err)
	}
	defer guard.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var charges, finished atomic.Int32
	consumer, err := idemkafka.New(guard, func(ctx context.Context, r *kgo.Record) error {
		charges.Add(1) // charge the card
		return nil
	}, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
		if e.Kind == idemkafka.EventBatch && finished.Add(int32(e.Records)) == 3 {
			cancel() // every record is done: stop the example
		}
	}))
	if err != nil {
		log.Fatal(err)
	}
	client, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumerGroup("payments"),
		kgo.ConsumeTopics("orders"),
	}, consumer.ClientOpts()...)...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if err := consumer.Run(ctx, client); err != nil {
		log.Fatal(err)
	}
	fmt.Println("records:", finished.Load(), "charges:", charges.Load())
	// Output: records: 3 charges: 2
}
