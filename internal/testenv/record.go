package testenv

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// Ledger counts the side effects of handlers per key, what a payment
// provider would have charged: the tests of every consumer check it for
// exactly one effect a key. The zero Ledger is empty and ready; it is
// safe for concurrent use.
type Ledger struct {
	mu sync.Mutex
	n  map[string]int
}

// Charge records one effect for key.
func (l *Ledger) Charge(key string) {
	l.mu.Lock()
	if l.n == nil {
		l.n = make(map[string]int)
	}
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

// Events records the events a consumer's observer sees, E being the
// consumer's event type. The zero Events is empty and ready; it is safe
// for concurrent use.
type Events[E any] struct {
	mu  sync.Mutex
	all []E
}

// Observe records ev: it is the observer the consumer is given.
func (e *Events[E]) Observe(_ context.Context, ev E) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

// Count returns how many events match f.
func (e *Events[E]) Count(f func(E) bool) int {
	return len(e.Filter(f))
}

// Filter returns the events that match f, in the order they were seen.
func (e *Events[E]) Filter(f func(E) bool) []E {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []E
	for _, ev := range e.all {
		if f(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// All returns every event seen, in order.
func (e *Events[E]) All() []E {
	return e.Filter(func(E) bool { return true })
}

// WaitFor polls cond every 10ms until it holds, and fails tb when it does
// not within d; what describes the condition.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
