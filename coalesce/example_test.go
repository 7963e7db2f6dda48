package coalesce_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/coalesce"
	"github.com/idemgo/idem/memstore"
)

// A consumer with many handler goroutines over a remote store wraps the
// store in New, so that the claims and outcomes of messages handled
// at the same time share round trips. memstore stands in for
// redisstore.New or pgstore.New here: over a local store New buys
// nothing.
func ExampleNew() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	g, _ := idem.New(coalesce.New(store), idem.Config{Namespace: "payments", Wait: time.Second})
	defer g.Close()

	var charged, replayed atomic.Int32
	var wg sync.WaitGroup
	for range 32 { // the handler goroutines
		wg.Go(func() {
			for i := range 100 { // every message delivered to every goroutine
				order := fmt.Sprint("order-", i)
				res, err := g.Do(context.Background(), order, nil, func(ctx context.Context) ([]byte, error) {
					charged.Add(1)
					return []byte("receipt-" + order), nil
				})
				if err != nil {
					log.Print(err) // a consumer would nack: the broker redelivers
				} else if res.Replayed {
					replayed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Println("charges:", charged.Load(), "replayed:", replayed.Load())
	// Output: charges: 100 replayed: 3100
}
