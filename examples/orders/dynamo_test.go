package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/idem/dynamostore"
)

// The orders API over DynamoDB (dynalite in the tests): -store
// dynamodb://host:port/table creates the table and serves from it.
func TestOrdersDynamoDB(t *testing.T) {
	endpoint := cmp.Or(os.Getenv("IDEM_DYNAMODB_URL"), "http://127.0.0.1:8000")
	raw := strings.Replace(endpoint, "http://", "dynamodb://", 1) + "/idemtest_orders_" + strings.ToLower(rand.Text()[:12])
	u, err := dynamostore.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections) // after the table is deleted
	c, err := u.NewClient(context.Background(), func(o *dynamodb.Options) {
		o.HTTPClient, o.RetryMaxAttempts = &http.Client{Transport: tr}, 1
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		unreachable(t, "a DynamoDB-compatible server at "+endpoint, "IDEM_DYNAMODB_URL", err)
	}
	t.Cleanup(func() { c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &u.Table}) })

	s, closeStore, err := openStore(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeStore)
	if _, ok := s.(*dynamostore.Store); !ok {
		t.Fatalf("dynamodb:// opened a %T", s)
	}
	wantWorking(t, s)
	testOrders(t, s)
	testConcurrentRetries(t, s)
}
