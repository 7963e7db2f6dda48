package memstore_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

func Example() {
	store, err := memstore.New(memstore.Config{MaxEntries: 100_000})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	ctx := context.Background()
	key := storage.StoreKey("orders", "order-1")
	c, _ := store.Claim(ctx, storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Second, Retention: time.Hour})
	fmt.Println(c.Outcome, c.Record.Attempt)
	store.Complete(ctx, key, c.Token, []byte("done"), time.Hour)
	c, _ = store.Claim(ctx, storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Second, Retention: time.Hour})
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
	a := storage.ClaimArgs{Key: "k", Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Hour}
	first, _ := store.Claim(ctx, a)
	now = now.Add(2 * time.Minute) // the holder crashed; its lease ran out
	second, _ := store.Claim(ctx, a)
	fmt.Println(second.Outcome, second.Record.Attempt, second.Token != first.Token)
	// Output: Acquired 2 true
}

// A full store evicts the record finished first to make room for a new
// key, and reports it, instead of refusing every new key until records
// expire.
func ExampleConfig_onEvict() {
	store, _ := memstore.New(memstore.Config{
		MaxEntries: 2,
		OnEvict:    func(ev memstore.Eviction) { fmt.Println("evicted", ev.Key, ev.Status) },
		Logger:     slog.New(slog.DiscardHandler), // the default warns on slog.Default()
	})
	defer store.Close()

	ctx := context.Background()
	for _, key := range []string{"a", "b", "c"} {
		c, _ := store.Claim(ctx, storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Hour})
		store.Complete(ctx, key, c.Token, []byte("done"), time.Hour)
	}
	fmt.Println(store.Len(), "records")
	// Output:
	// evicted a Completed
	// 2 records
}
