package natspub_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/natspub"
)

// A relay that publishes the outbox to JetStream until interrupted. The
// stream must take the messages' subjects; its duplicate window drops a
// message the relay publishes again after a crash.
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// No reconnect buffer: a message lost with a connection must not be
	// overtaken by the next one on the new connection.
	nc, err := nats.Connect(nats.DefaultURL, nats.ReconnectBufSize(-1), nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		log.Fatal(err)
	}
	pub, err := natspub.New(js)
	if err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer relay.Close()
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
