package memstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/memstore"
)

func Example() {
	store, err := memstore.New(memstore.Config{MaxEntries: 100_000})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	ctx := context.Background()
	key := idem.StoreKey("orders", "order-1")
	c, _ := store.Claim(ctx, idem.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Second, Retention: time.Hour})
	fmt.Println(c.Outcome, c.Record.Attempt)
	store.Complete(ctx, key, c.Token, []byte("done"), time.Hour)
	c, _ = store.Claim(ctx, idem.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Second, Retention: time.Hour})
	fmt.Println(c.Outcome, string(c.Record.Result))
	// Output:
	// Acquired 1
	// Duplicate done
}

// An injected clock makes expiry testable without sleeping.
func ExampleConfig_now() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store, _ := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	defer store.Close()

	ctx := context.Background()
	a := idem.ClaimArgs{Key: "k", Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Hour}
	first, _ := store.Claim(ctx, a)
	now = now.Add(2 * time.Minute) // the holder crashed; its lease ran out
	second, _ := store.Claim(ctx, a)
	fmt.Println(second.Outcome, second.Record.Attempt, second.Token != first.Token)
	// Output: Acquired 2 true
}
