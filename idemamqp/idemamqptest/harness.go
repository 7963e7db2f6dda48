package idemamqptest

import (
	"context"
	"crypto/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/storage"
)

// Ledger counts the side effects of handlers per key: what a payment
// provider would have charged.
type Ledger struct {
	mu sync.Mutex
	n  map[string]int
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{n: map[string]int{}} }

// Charge records one effect for key.
func (l *Ledger) Charge(key string) {
	l.mu.Lock()
	l.n[key]++
	l.mu.Unlock()
}

// Count returns the effects of key.
func (l *Ledger) Count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[key]
}

// Keys returns how many keys have at least one effect.
func (l *Ledger) Keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.n)
}

// Check fails t for every key of keys without exactly one effect, and for
// every key with effects that is not in keys.
func (l *Ledger) Check(t testing.TB, keys []string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	lost, doubled := 0, 0
	for _, k := range keys {
		switch n := l.n[k]; {
		case n == 0:
			lost++
			if lost <= 5 {
				t.Errorf("key %s: no effect (lost)", k)
			}
		case n > 1:
			doubled++
			if doubled <= 5 {
				t.Errorf("key %s: %d effects, want 1", k, n)
			}
		}
	}
	for k := range l.n {
		if !slices.Contains(keys, k) {
			t.Errorf("key %s: effects of a key never published", k)
		}
	}
	if lost+doubled > 0 {
		t.Errorf("%d keys: %d lost, %d with more than one effect", len(keys), lost, doubled)
	}
}

// Events records the events of consumers.
type Events struct {
	mu  sync.Mutex
	all []idemamqp.Event
}

// Observe is an observer for idemamqp.WithObserver.
func (e *Events) Observe(_ context.Context, ev idemamqp.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

// Count returns how many events match f.
func (e *Events) Count(f func(idemamqp.Event) bool) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if f(ev) {
			n++
		}
	}
	return n
}

// Kind returns how many events of kind k were seen.
func (e *Events) Kind(k idemamqp.EventKind) int {
	return e.Count(func(ev idemamqp.Event) bool { return ev.Kind == k })
}

// Of returns the events of kind k.
func (e *Events) Of(k idemamqp.EventKind) []idemamqp.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []idemamqp.Event
	for _, ev := range e.all {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
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
