package main

import (
	"flag"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// queueOrder is the body of an OrderCreated message on RabbitMQ and SQS.
type queueOrder struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
}

// queueFlags are the flags of the RabbitMQ and SQS examples.
type queueFlags struct {
	orders  int
	dupRate float64
	seed    uint64
}

// parseFlags parses args into f; name names the flag set, and verb and
// done say how the broker's example puts an event on its queue ("publish",
// "published"; "send", "sent").
func (f *queueFlags) parseFlags(name, verb, done string, out io.Writer, args []string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&f.orders, "orders", 20, "OrderCreated events to "+verb)
	fs.Float64Var(&f.dupRate, "dup-rate", 0.3, "the chance that an event is "+done+" a second time, in [0, 1]")
	fs.Uint64Var(&f.seed, "seed", 1, "the seed of the amounts and duplicates")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.orders < 2 || !(f.dupRate >= 0 && f.dupRate <= 1) {
		return fmt.Errorf("payments: -orders %d and -dup-rate %v: want at least 2 orders and a rate in [0, 1]", f.orders, f.dupRate)
	}
	return nil
}

// queueReport is what a run of the RabbitMQ or SQS example did.
type queueReport struct {
	published atomic.Int64 // messages, duplicates included
	settled   atomic.Int64 // acked (deleted) or dead-lettered
	replayed  atomic.Int64
	delayed   atomic.Int64
	dead      atomic.Int64

	mu      sync.Mutex
	charges map[string]int // by order
}

func (r *queueReport) charge(order string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.charges[order]++
	return r.charges[order]
}

// totals returns how many charges the run made, and how many of them
// charged an order again.
func (r *queueReport) totals() (charges, twice int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.charges {
		charges += n
		twice += max(n-1, 0)
	}
	return charges, twice
}

// lockedWriter serialises the writes of the replicas.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
