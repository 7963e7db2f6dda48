package kafkapg_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemkafka/kafkapg"
	"github.com/idemgo/idem/pgstore"
)

// A payments consumer whose charges, outcomes and offsets commit together.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool, pgstore.DefaultTable); err != nil {
		log.Fatal(err)
	}
	if err := kafkapg.Migrate(ctx, pool, kafkapg.DefaultOffsetsTable); err != nil {
		log.Fatal(err)
	}
	charge := func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		_, err := tx.Exec(ctx, "INSERT INTO charges (order_event) VALUES ($1)", r.Value)
		return err
	}
	c, err := kafkapg.New(pool, charge, kafkapg.WithConsumerOptions(
		idemkafka.WithSharedScope(),
		idemkafka.WithDeadLetter("orders.dlq"),
	))
	if err != nil {
		log.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers("localhost:9092"),
		kgo.ConsumerGroup("payments"),
		kgo.ConsumeTopics("orders"),
	}, c.ClientOpts()...)...)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	if err := c.Run(ctx, cl); err != nil {
		log.Fatal(err)
	}
}
