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
	"github.com/idemgo/idem/storage"
)

// The messages of a batch are claimed and stored by chunks, not one by
// one: every key goes to the store in a ClaimBatch and its outcome in the
// CompleteBatch of the same chunk, and no other round trip is made. How
// many chunks a batch makes depends on how its messages arrive (those
// already arrived when a chunk is taken form it), which the machine's load
// moves; scripts/bench-nats.sh reports the round trips per message.
func TestBatchIsClaimedAndStoredTogether(t *testing.T) {
	t.Parallel()
	const n = 64
	cons := orders(t, n)
	calls := &batchCalls{TripCounter: &idemnatstest.TripCounter{Store: memStore(t)}}
	g := newGuard(t, calls, idem.Config{})
	var ev events
	run(t, g, cons, func(context.Context, jetstream.Msg) error { return nil },
		idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithBatchSize(n), idemnats.WithObserver(ev.Observe))
	waitFor(t, 30*time.Second, "every message acked", func() bool {
		return ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventAcked }) == n
	})
	calls.mu.Lock()
	defer calls.mu.Unlock()
	trips := calls.N.Load()
	if calls.claimed != n || calls.stored != n || len(calls.chunks) == 0 || trips != 2*int64(len(calls.chunks)) {
		t.Errorf("%d keys claimed and %d stored in %d ClaimBatch calls, %d store round trips in all; "+
			"want %d of each, two round trips per chunk and no other", calls.claimed, calls.stored, len(calls.chunks), trips, n)
	}
}

// batchCalls counts the keys its batch calls carry, and the ClaimBatch
// calls, beside TripCounter's round trips.
type batchCalls struct {
	*idemnatstest.TripCounter
	mu              sync.Mutex
	chunks          []int // the keys of each ClaimBatch
	claimed, stored int
}

func (s *batchCalls) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	s.mu.Lock()
	s.chunks = append(s.chunks, len(args))
	s.claimed += len(args)
	s.mu.Unlock()
	return s.TripCounter.ClaimBatch(ctx, args)
}

func (s *batchCalls) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	s.mu.Lock()
	s.stored += len(cs)
	s.mu.Unlock()
	return s.TripCounter.CompleteBatch(ctx, cs)
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
		idemnats.WithObserver(ev.Observe))
	waitFor(t, 30*time.Second, "every message settled", func() bool {
		return ev.Count(func(e idemnats.Event) bool {
			return e.Kind == idemnats.EventAcked || e.Kind == idemnats.EventDiscarded
		}) == n
	})
	for i := range n {
		k := "order-" + strconv.Itoa(i)
		if want := 1 - btoi(k == "order-3"); fx.get(k) != want {
			t.Errorf("%s: %d effects, want %d", k, fx.get(k), want)
		}
	}
	dead := ev.Count(func(e idemnats.Event) bool {
		return e.Kind == idemnats.EventDiscarded && e.Key == "order-3" && errors.Is(e.Err, idem.ErrTooManyAttempts)
	})
	if dead != 1 || ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventDiscarded }) != 1 {
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
