package sqspub_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/sqspub"
)

// A relay that publishes the outbox's rows to SQS queues, each to the
// queue URL of its Destination.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// sqs.NewFromConfig(cfg) with config.LoadDefaultConfig(ctx) in
	// production: the region and credentials of the environment.
	pub, err := sqspub.New(sqs.New(sqs.Options{Region: "eu-west-1"}))
	if err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer relay.Close()
	if err := relay.Run(ctx); err != nil { // until ctx ends
		log.Fatal(err)
	}
}
