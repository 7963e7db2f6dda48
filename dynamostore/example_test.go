package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/dynamostore"
)

// A Guard over DynamoDB. The client is the application's own, configured
// as usual (region, credentials, retries); the store only uses it.
func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	client := dynamodb.NewFromConfig(cfg)

	store, err := dynamostore.New(client, dynamostore.Config{Table: "idem_records"})
	if err != nil {
		log.Fatal(err)
	}
	g, err := idem.New(store, idem.Config{Namespace: "charges", Retention: 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	res, err := g.Do(ctx, "order-1", []byte(`{"amount":1000}`), func(ctx context.Context) ([]byte, error) {
		return []byte("ch_1"), nil // charge the card here
	})
	switch {
	case errors.Is(err, idem.ErrStoreUnavailable):
		log.Print("DynamoDB is unreachable or throttling: retry later") // the Guard failed closed
	case err != nil:
		log.Print(err)
	default:
		fmt.Println(string(res.Value), res.Replayed)
	}
}

// CreateTable makes the table at start-up (or in a migration step); it
// does nothing to a table that exists with the right shape.
func ExampleCreateTable() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := dynamostore.CreateTable(ctx, dynamodb.NewFromConfig(cfg), "idem_records"); err != nil {
		log.Fatal(err)
	}
}

// A store URL names a local server, such as dynalite or DynamoDB Local, or
// (without a host) DynamoDB on AWS.
func ExampleParseURL() {
	for _, raw := range []string{"dynamodb://127.0.0.1:8000/idem_records", "dynamodb:///payments_idem?region=eu-west-1"} {
		u, err := dynamostore.ParseURL(raw)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("endpoint %q region %q table %q\n", u.Endpoint, u.Region, u.Table)
	}
	// Output:
	// endpoint "http://127.0.0.1:8000" region "" table "idem_records"
	// endpoint "" region "eu-west-1" table "payments_idem"
}
