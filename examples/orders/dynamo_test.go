package main

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"
)

// The orders API over DynamoDB (dynalite in the tests): -store
// dynamodb://host:port/table creates the table and serves from it.
func TestOrdersDynamoDB(t *testing.T) {
	raw := dynamostoretest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
