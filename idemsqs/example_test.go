package idemsqs_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemsqs"
	"github.com/idemgo/idem/memstore"
)

// A payments consumer: each payment message charges once, however often
// SQS delivers it, and poison goes to the payments-dlq queue.
func Example() {
	ctx := context.Background()
	// sqs.NewFromConfig(cfg) with config.LoadDefaultConfig(ctx) in
	// production: the region and credentials of the environment.
	client := sqs.New(sqs.Options{Region: "eu-west-1"})
	queue, dlq := "https://sqs.eu-west-1.amazonaws.com/123456789012/payments",
		"https://sqs.eu-west-1.amazonaws.com/123456789012/payments-dlq"

	store, err := memstore.New(memstore.Config{}) // redisstore, pgstore or dynamostore across processes
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	g, err := idem.New(store, idem.Config{Namespace: "payments"})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	charge := func(ctx context.Context, m types.Message) error {
		// Charge the customer; idem.TokenFrom(ctx) fences the write.
		return nil
	}
	c, err := idemsqs.New(g, client, queue, charge,
		// The tenant, from an attribute only the payments gateway sets.
		idemsqs.WithScope(func(m types.Message) string { return aws.ToString(m.MessageAttributes["tenant"].StringValue) }),
		idemsqs.WithDeadLetter(dlq),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil { // until ctx ends
		log.Fatal(err)
	}
}
