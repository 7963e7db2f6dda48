package kafkapub_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/kafkapub"
)

// A relay that produces the outbox to Kafka until interrupted; each
// message's Destination is its topic and its Key the record key.
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092")) // idempotent by default
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	pub, err := kafkapub.New(client)
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
