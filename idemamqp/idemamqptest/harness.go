package idemamqptest

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/storage"
)

// Ledger counts the side effects of handlers per key: what a payment
// provider would have charged.
type Ledger = testenv.Ledger

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{} }

// Events records the events of consumers; its Observe is an observer for
// idemamqp.WithObserver.
type Events struct {
	testenv.Events[idemamqp.Event]
}

// Kind returns how many events of kind k were seen.
func (e *Events) Kind(k idemamqp.EventKind) int {
	return e.Count(func(ev idemamqp.Event) bool { return ev.Kind == k })
}

// Of returns the events of kind k.
func (e *Events) Of(k idemamqp.EventKind) []idemamqp.Event {
	return e.Filter(func(ev idemamqp.Event) bool { return ev.Kind == k })
}

// Settled returns how many deliveries were acked, dead-lettered or
// discarded.
func (e *Events) Settled() int {
	return e.Count(func(ev idemamqp.Event) bool {
		return ev.Kind == idemamqp.EventAcked || ev.Kind == idemamqp.EventDeadLettered || ev.Kind == idemamqp.EventDiscarded
	})
}

// NewGuard returns a Guard over s, closed when t ends, in a namespace of
// its own unless cfg.Namespace is set. A zero cfg.Lease becomes 10s.
func NewGuard(t testing.TB, s storage.Store, cfg idem.Config) *idem.Guard {
	t.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = "idemamqptest-" + rand.Text()
	}
	if cfg.Lease == 0 {
		cfg.Lease = 10 * time.Second
	}
	g, err := idem.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// Start runs c until t ends (or stop is called) in a goroutine; the
// queue's delay queue is deleted at the end. stop cancels Run, waits for
// it and fails t if it returned an error or took longer than wait.
func Start(t testing.TB, q *Queue, c *idemamqp.Consumer) (stop func()) {
	t.Helper()
	q.DeleteAtEnd(c.DelayQueue())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(time.Minute):
				t.Errorf("Run did not return a minute after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
