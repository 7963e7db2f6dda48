package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// OrderCreated is the event the order service publishes.
type OrderCreated struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
}

// newOrders returns what the producer publishes for n orders: each
// order's event once and, with probability dupRate, a second time a few
// events later, as a producer that retries after a timeout does. dups is
// how many second copies there are.
func newOrders(n int, dupRate float64, seed uint64) (events []OrderCreated, dups int) {
	rng := rand.New(rand.NewPCG(seed, 0x0de5))
	var later []OrderCreated
	for i := range n {
		e := OrderCreated{OrderID: fmt.Sprintf("order-%04d", i+1), Customer: fmt.Sprintf("cus_%03d", rng.IntN(1000)), AmountCents: 500 + rng.IntN(20000)}
		events = append(events, e)
		if len(later) > 0 && rng.IntN(2) == 0 {
			events = append(events, later[0])
			later = later[1:]
		}
		if rng.Float64() < dupRate {
			later = append(later, e)
			dups++
		}
	}
	return append(events, later...), dups
}

// provider is the payment provider: it charges cards and keeps count.
type provider struct {
	mu      sync.Mutex
	out     io.Writer
	charges map[string]int // by order
	total   int
}

func newProvider(out io.Writer) *provider { return &provider{out: out, charges: map[string]int{}} }

// charge charges the order's customer and prints the charge.
func (p *provider) charge(e OrderCreated) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total++
	p.charges[e.OrderID]++
	fmt.Fprintf(p.out, "charged %s: %s, %d.%02d (charge ch_%d)\n", e.OrderID, e.Customer, e.AmountCents/100, e.AmountCents%100, p.total)
}

// handle is the consumer's work for one event, run inside idem: decode,
// charge. An event that does not decode never will: a permanent error
// sends it to the dead-letter topic instead of retrying it.
func (p *provider) handle(_ context.Context, body []byte) error {
	var e OrderCreated
	if err := json.Unmarshal(body, &e); err != nil || e.OrderID == "" {
		return idem.Permanent(fmt.Errorf("payments: not an OrderCreated event (%d bytes): %.64q", len(body), body))
	}
	p.charge(e)
	return nil
}

// summary reports the charges made for orders orders.
func (p *provider) summary(orders int) (charged, double int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.charges {
		charged++
		double += max(n-1, 0)
	}
	return charged, double
}

// openStore opens the idempotency store at rawURL: mem:// or redis://.
func openStore(ctx context.Context, rawURL string) (storage.Store, func(), error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("payments: --store %q: %v", rawURL, err)
	}
	switch u.Scheme {
	case "mem":
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	case "redis", "rediss":
		opts, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, nil, fmt.Errorf("payments: --store: %w", err)
		}
		client := redis.NewClient(opts)
		if err := client.Ping(ctx).Err(); err != nil {
			client.Close()
			return nil, nil, fmt.Errorf("payments: --store: cannot reach Redis: %w", err)
		}
		s, err := redisstore.New(client, redisstore.Config{})
		if err != nil {
			client.Close()
			return nil, nil, err
		}
		return s, func() { client.Close() }, nil
	}
	return nil, nil, fmt.Errorf("payments: --store %q: mem:// or redis://host:port/db", rawURL)
}
