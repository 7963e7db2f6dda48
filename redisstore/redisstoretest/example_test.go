package redisstoretest_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

// testDuplicateGetsTheOutcome is a test of a Redis store; in a test file
// of your own it would be TestDuplicateGetsTheOutcome. It runs in parallel
// with every other test: its keys are under a prefix of its own, deleted
// when it ends.
func testDuplicateGetsTheOutcome(t *testing.T) {
	t.Parallel()
	client := redisstoretest.Client(t) // skips, or fails under IDEM_REQUIRE_SERVICES=1, without a server
	store := redisstoretest.Store(t, client, redisstore.Config{})

	ctx := context.Background()
	args := storage.ClaimArgs{Key: "order-42", Lease: time.Minute, Retention: time.Hour}
	first, err := store.Claim(ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Complete(ctx, args.Key, first.Token, []byte("receipt"), time.Hour); err != nil {
		t.Fatal(err)
	}
	again, err := store.Claim(ctx, args)
	if err != nil || again.Outcome != storage.Duplicate || string(again.Record.Result) != "receipt" {
		t.Fatalf("second claim: %v %q %v, want the duplicate's receipt", again.Outcome, again.Record.Result, err)
	}
	if n, err := client.Exists(ctx, store.RedisKey(args.Key)).Result(); err != nil || n != 1 {
		t.Errorf("the record's key %s: exists %d (%v), want it under the test's prefix", store.RedisKey(args.Key), n, err)
	}
}

func Example() {}
