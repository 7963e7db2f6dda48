package idemnats_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/storage"
)

// AckWait is short and the handlers are slow: one runs three AckWaits,
// and the messages of its batch wait their turn behind it. InProgress
// keeps every one of them from redelivery: each is handled and acked at
// its first delivery, and a second fetch loop, idle meanwhile, never
// receives a redelivered copy.
func TestInProgressPreventsRedelivery(t *testing.T) {
	t.Parallel()
	_, js := connect(t, natsURL)
	s := newStream(t, js, jetstream.StreamConfig{})
	const ackWait = 600 * time.Millisecond
	cons := newConsumer(t, s, jetstream.ConsumerConfig{AckWait: ackWait})
	for _, k := range []string{"slow", "a", "b", "c"} {
		publish(t, js, subject(s, "jobs"), k, jetstream.MsgIDHeader, k)
	}
	var ev events
	var mu sync.Mutex
	deliveries := map[string][]uint64{}
	c, err := idemnats.New(newGuard(t, memStore(t), idem.Config{}), cons, func(ctx context.Context, msg jetstream.Msg) error {
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		mu.Lock()
		deliveries[string(msg.Data())] = append(deliveries[string(msg.Data())], md.NumDelivered)
		mu.Unlock()
		work := ackWait / 2
		if string(msg.Data()) == "slow" {
			work = 3 * ackWait
		}
		time.Sleep(work) // the handler's work
		return nil
	}, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithBatchSize(4), idemnats.WithConcurrency(2), idemnats.WithObserver(ev.Observe))
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	waitFor(t, 20*time.Second, "four messages acked", func() bool {
		return ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventAcked }) == 4
	})
	waitFor(t, 5*time.Second, "the consumer drained", func() bool { return drained(t, cons) })
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"slow", "a", "b", "c"} {
		if d := deliveries[k]; len(d) != 1 || d[0] != 1 {
			t.Errorf("%s was handled at deliveries %v, want [1]", k, d)
		}
	}
	if n := ev.Count(func(e idemnats.Event) bool {
		return e.Kind == idemnats.EventDelayed || e.Kind == idemnats.EventRequeued
	}); n != 0 {
		t.Errorf("%d redeliveries were refused as busy or retried, want 0", n)
	}
	if n := ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventAcked && e.Delivered != 1 }); n != 0 {
		t.Errorf("%d acks of a redelivery, want 0", n)
	}
	if n := ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventInProgress && e.BrokerErr == nil }); n < 4 {
		t.Errorf("%d InProgress sent, want at least 4 (the slow handler's and its batch's)", n)
	}
}

// When Run's context ends, the handler running gets the shutdown timeout,
// then its context is cancelled and its key released; the messages behind
// it are handed back, their keys released unhandled. Run returns, and
// another Run gets all three within the fetch wait, long before AckWait
// (they were naked, not left to time out), and handles each once.
func TestShutdownHandsBackInFlight(t *testing.T) {
	t.Parallel()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{AckWait: time.Minute})
	store := memStore(t)
	g := newGuard(t, store, idem.Config{})
	for _, k := range []string{"stuck", "next-1", "next-2"} {
		publish(t, js, subject(s, "jobs"), k, jetstream.MsgIDHeader, k)
	}
	started := make(chan struct{})
	stuckCause := make(chan error, 1)
	stop := run(t, g, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if string(msg.Data()) != "stuck" {
			t.Errorf("%s started after the consumer was told to stop", msg.Data())
			return nil
		}
		close(started)
		<-ctx.Done()
		stuckCause <- context.Cause(ctx)
		return ctx.Err()
	}, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithDrainTimeout(100*time.Millisecond), idemnats.WithFetchWait(time.Second))
	waitFor(t, 10*time.Second, "the batch fetched", func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	})
	stopped := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(stopped); d > 5*time.Second {
		t.Errorf("Run returned %v after its context ended, with a 100ms shutdown timeout", d)
	}
	if cause := <-stuckCause; !errors.Is(cause, context.Canceled) {
		t.Errorf("the stuck handler's context ended with %v, want Canceled", cause)
	}
	ctx := context.Background()
	// The keys were claimed as the batch arrived; each is released now.
	for _, k := range []string{"stuck", "next-1", "next-2"} {
		if r, err := store.Get(ctx, g.StoreKey(k)); err != nil || r.Status != storage.StatusInProgress || r.Token != 0 {
			t.Errorf("%s is %+v (%v), want released", k, r, err)
		}
	}

	var fx effects
	c2, err := idemnats.New(g, cons, func(ctx context.Context, msg jetstream.Msg) error {
		fx.add(string(msg.Data()))
		return nil
	}, idemnats.WithSharedScope(), idemnats.WithDiscardPoison())
	if err != nil {
		t.Fatal(err)
	}
	start(t, c2)
	waitFor(t, 10*time.Second, "the handed-back messages handled (well within AckWait)", func() bool {
		return fx.keys() == 3 && drained(t, cons)
	})
	for _, k := range []string{"stuck", "next-1", "next-2"} {
		if n := fx.get(k); n != 1 {
			t.Errorf("%s: %d effects, want 1", k, n)
		}
	}
}

// A handler that finishes within the shutdown timeout has its outcome
// stored and its message acked before Run returns.
func TestShutdownLetsHandlerFinish(t *testing.T) {
	t.Parallel()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{AckWait: time.Minute})
	store := memStore(t)
	g := newGuard(t, store, idem.Config{})
	publish(t, js, subject(s, "jobs"), "j", jetstream.MsgIDHeader, "j")
	started, finish := make(chan struct{}), make(chan struct{})
	c, err := idemnats.New(g, cons, func(ctx context.Context, msg jetstream.Msg) error {
		close(started)
		<-finish
		return ctx.Err() // nil: the shutdown timeout has not passed
	}, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithDrainTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-started
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while its handler was still running", err)
	default:
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r, err := store.Get(context.Background(), g.StoreKey("j")); err != nil || r.Status != storage.StatusCompleted {
		t.Fatalf("record %+v (%v), want Completed", r, err)
	}
	waitFor(t, 5*time.Second, "the message acked", func() bool { return drained(t, cons) })
}
