package idemnats_test

import (
	"context"
	"log"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/memstore"
)

// A payments consumer: each PaymentRequested message charges once, however
// often JetStream delivers it, and poison goes to PAYMENTS_DLQ.
func Example() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "PAYMENTS_DLQ", Subjects: []string{"dlq.payments"}}); err != nil {
		log.Fatal(err)
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:   "charger",
		AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		log.Fatal(err)
	}

	store, err := memstore.New(memstore.Config{}) // redisstore or pgstore across processes
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	g, err := idem.New(store, idem.Config{Namespace: "payments"})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	charge := func(ctx context.Context, msg jetstream.Msg) error {
		// Charge the customer; idem.TokenFrom(ctx) fences the write.
		return nil
	}
	c, err := idemnats.New(g, cons, charge,
		// payments.<tenant>.requested: each tenant has its own keys.
		idemnats.WithScope(func(msg jetstream.Msg) string { return strings.Split(msg.Subject(), ".")[1] }),
		idemnats.WithDeadLetter(js, "dlq.payments"),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil { // until ctx ends
		log.Fatal(err)
	}
}
