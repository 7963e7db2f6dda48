package idemnats_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/idemnats/idemnatstest"
)

// A batch fetched at once is claimed in one store round trip and stored in
// one, not one of each per message: over a store that counts its calls,
// far fewer round trips than messages.
func TestBatchIsClaimedAndStoredTogether(t *testing.T) {
	t.Parallel()
	const n = 64
	cons := orders(t, n)
	trips := &idemnatstest.TripCounter{Store: memStore(t)}
	g := newGuard(t, trips, idem.Config{})
	var ev events
	run(t, g, cons, func(context.Context, jetstream.Msg) error { return nil },
		idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithBatchSize(n), idemnats.WithObserver(ev.observe))
	waitFor(t, 30*time.Second, "every message acked", func() bool {
		return ev.count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventAcked }) == n
	})
	// Two round trips per chunk: the messages already arrived when one is
	// taken form a chunk, so a batch sent at once is one or a few chunks.
	if got := trips.N.Load(); got > n/2 {
		t.Errorf("%d store round trips for %d messages fetched in one batch, want a claim and a store per chunk", got, n)
	}
}

// A message that fails does not cost the others of its batch a claim: with
// the Guard's MaxAttempts 1, where a second claim of a key would make it
// poison as too-many-attempts, every other message of the batch is handled
// once and acked, and the failed one, naked, comes back and is poison
// (discarded).
func TestFailureCostsTheBatchNoAttempts(t *testing.T) {
	t.Parallel()
	const n = 32
	cons := orders(t, n)
	g := newGuard(t, memStore(t), idem.Config{MaxAttempts: 1})
	var fx effects
	var ev events
	var mu sync.Mutex
	var order []string
	run(t, g, cons, func(_ context.Context, msg jetstream.Msg) error {
		k := msg.Headers().Get(jetstream.MsgIDHeader)
		mu.Lock()
		order = append(order, k)
		mu.Unlock()
		if k == "order-3" {
			return errors.New("the payment provider timed out")
		}
		fx.add(k)
		return nil
	}, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithBatchSize(n), idemnats.WithRetryBackoff(10*time.Millisecond, 10*time.Millisecond),
		idemnats.WithObserver(ev.observe))
	waitFor(t, 30*time.Second, "every message settled", func() bool {
		return ev.count(func(e idemnats.Event) bool {
			return e.Kind == idemnats.EventAcked || e.Kind == idemnats.EventDiscarded
		}) == n
	})
	for i := range n {
		k := "order-" + strconv.Itoa(i)
		if want := 1 - btoi(k == "order-3"); fx.get(k) != want {
			t.Errorf("%s: %d effects, want %d", k, fx.get(k), want)
		}
	}
	dead := ev.count(func(e idemnats.Event) bool {
		return e.Kind == idemnats.EventDiscarded && e.Key == "order-3" && errors.Is(e.Err, idem.ErrTooManyAttempts)
	})
	if dead != 1 || ev.count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventDiscarded }) != 1 {
		t.Errorf("poison: %d of order-3 (too many attempts), want 1 and no other", dead)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, k := range order[:n] { // stream order, the failed one at its place
		if want := "order-" + strconv.Itoa(i); k != want {
			t.Fatalf("handler %d ran for %s, want %s: %v", i, k, want, order)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// orders returns the consumer of a stream of the test's own holding n
// messages, Nats-Msg-Ids order-0 to order-<n-1>.
func orders(t *testing.T, n int) jetstream.Consumer {
	t.Helper()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{})
	for i := range n {
		publish(t, js, subject(s, "orders"), "order", jetstream.MsgIDHeader, "order-"+strconv.Itoa(i))
	}
	return cons
}
