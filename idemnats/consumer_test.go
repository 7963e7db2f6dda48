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

// With the default key, Nats-Msg-Id, the stream's duplicate window drops a
// copy published within it; a copy published after it is a message of its
// own, which the consumer acks as a duplicate without running the handler.
func TestMsgIDPastTheDuplicateWindow(t *testing.T) {
	t.Parallel()
	_, js := connect(t, natsURL)
	const window = 100 * time.Millisecond
	s := newStream(t, js, jetstream.StreamConfig{Duplicates: window})
	cons := newConsumer(t, s, jetstream.ConsumerConfig{})
	var fx effects
	var ev events
	run(t, newGuard(t, memStore(t), idem.Config{}), cons, func(ctx context.Context, msg jetstream.Msg) error {
		fx.add(msg.Headers().Get(jetstream.MsgIDHeader))
		return nil
	}, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithObserver(ev.Observe))

	if ack := publish(t, js, subject(s, "pay"), "charge 10", jetstream.MsgIDHeader, "pay-1"); ack.Duplicate {
		t.Fatal("the first publish was taken for a duplicate")
	}
	if ack := publish(t, js, subject(s, "pay"), "charge 10", jetstream.MsgIDHeader, "pay-1"); !ack.Duplicate {
		t.Fatal("a publish within the duplicate window was stored again")
	}
	waitFor(t, 10*time.Second, "the first copy acked", func() bool { return drained(t, cons) && fx.get("pay-1") == 1 })
	// Publish again until the stream takes it: the window has passed.
	waitFor(t, 10*time.Second, "a publish past the window", func() bool {
		return !publish(t, js, subject(s, "pay"), "charge 10", jetstream.MsgIDHeader, "pay-1").Duplicate
	})
	waitFor(t, 10*time.Second, "the late copy acked", func() bool {
		return ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventAcked && e.Replayed }) == 1
	})
	if n := fx.get("pay-1"); n != 1 {
		t.Fatalf("pay-1 had %d effects, want 1", n)
	}
}

// stallingStore is a store whose Extend never reaches the server: the
// heartbeat of a Guard over it fails, as when its process is paused or cut
// off from the store.
type stallingStore struct{ storage.Store }

func (stallingStore) Extend(context.Context, string, storage.Token, time.Duration) error {
	return errors.New("network unreachable")
}

// Two consumers share a stream. Consumer A takes a message and stalls
// past its lease (its heartbeat cannot reach the store); B takes a
// duplicate of it, finds the key busy until A's lease ends, then takes it
// over and handles it. A's handler, which checks its context before the
// effect, makes none; A's message is then acked as a duplicate. One effect.
func TestStalledHandlerPastItsLease(t *testing.T) {
	t.Parallel()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{})
	store := memStore(t)
	const lease = 300 * time.Millisecond
	const keyHeader = "Idempotency-Key"

	var fx effects
	var ev events
	var stalls sync.Once
	aStarted, aResume := make(chan struct{}), make(chan struct{})
	aCause := make(chan error, 1)
	handlerA := func(ctx context.Context, msg jetstream.Msg) error {
		stalled := false
		stalls.Do(func() {
			stalled = true
			close(aStarted)
			<-aResume // stalls, ignoring its context
			aCause <- context.Cause(ctx)
		})
		if err := ctx.Err(); err != nil {
			return err // the lease is gone: another consumer may do it
		}
		if stalled {
			t.Error("A's handler went on after its lease was lost")
		}
		fx.add(string(msg.Data()))
		return nil
	}
	gA := newGuard(t, stallingStore{store}, idem.Config{Namespace: "stall", Lease: lease})
	a, err := idemnats.New(gA, cons, handlerA, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithKeyHeader(keyHeader),
		idemnats.WithBatchSize(1), idemnats.WithRetryBackoff(10*time.Millisecond, 10*time.Millisecond), idemnats.WithObserver(ev.Observe))
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	publish(t, js, subject(s, "pay"), "pay-1", jetstream.MsgIDHeader, "copy-1", keyHeader, "pay-1")
	<-aStarted

	gB := newGuard(t, store, idem.Config{Namespace: "stall", Lease: lease})
	var bFresh counter
	b, err := idemnats.New(gB, cons, func(ctx context.Context, msg jetstream.Msg) error {
		fx.add(string(msg.Data()))
		bFresh.Add(1)
		return nil
	}, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithKeyHeader(keyHeader), idemnats.WithBatchSize(1),
		idemnats.WithBusyDelay(50*time.Millisecond), idemnats.WithObserver(ev.Observe))
	if err != nil {
		t.Fatal(err)
	}
	start(t, b)
	publish(t, js, subject(s, "pay"), "pay-1", jetstream.MsgIDHeader, "copy-2", keyHeader, "pay-1")
	waitFor(t, 10*time.Second, "B to take the key over", func() bool { return bFresh.Load() == 1 })
	if n := ev.Count(func(e idemnats.Event) bool {
		return e.Kind == idemnats.EventDelayed && errors.Is(e.Err, idem.ErrInProgress)
	}); n == 0 {
		t.Error("B never found the key busy: it did not wait for A's lease to end")
	}
	close(aResume)
	waitFor(t, 10*time.Second, "both copies acked", func() bool { return drained(t, cons) })
	if n := fx.get("pay-1"); n != 1 {
		t.Fatalf("pay-1 had %d effects, want 1", n)
	}
	if cause := <-aCause; !errors.Is(cause, idem.ErrLeaseLost) {
		t.Errorf("A's handler context ended with %v, want ErrLeaseLost", cause)
	}
	if n := ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventAcked && e.Replayed }); n != 1 {
		t.Errorf("%d copies acked as duplicates, want 1 (A's)", n)
	}
}
