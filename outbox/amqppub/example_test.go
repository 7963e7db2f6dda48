package amqppub_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/amqppub"
)

// A relay that publishes the outbox to the "orders" exchange of RabbitMQ
// until interrupted; each message's Destination is its routing key, and a
// consumer finds its ID in the message-id property and, here, in the
// idempotency-key header too.
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	pub, err := amqppub.New("amqp://guest:guest@127.0.0.1:5672/",
		amqppub.WithExchange("orders"), amqppub.WithIDHeader("idempotency-key"))
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer relay.Close()
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
