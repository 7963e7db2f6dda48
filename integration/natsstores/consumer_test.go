package natsstores_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/idemnats/idemnatstest"
	"github.com/idemgo/idem/internal/testenv"
)

// Duplicates published as messages of their own (another Nats-Msg-Id, or
// past the stream's duplicate window) reach the consumer: with two
// consumer processes, each fetching two batches at once, every key has its
// effect once, and every copy is acked.
func TestDuplicatesOneEffectPerKey(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			_, js := idemnatstest.Connect(t, idemnatstest.URL())
			store := st.new(t)
			s := idemnatstest.NewStream(t, js, jetstream.StreamConfig{})
			cons := idemnatstest.NewConsumer(t, s, jetstream.ConsumerConfig{MaxAckPending: 1000})

			const keys, copies = 100, 3
			for c := range copies {
				for k := range keys {
					// Each copy has its own Nats-Msg-Id, as a producer
					// retrying after the window, or two producers, send.
					idemnatstest.Publish(t, js, idemnatstest.Subject(s, "orders"), "order "+strconv.Itoa(k),
						"Idempotency-Key", "order-"+strconv.Itoa(k), jetstream.MsgIDHeader, fmt.Sprintf("%d-%d", k, c))
				}
			}
			var fx testenv.Ledger
			var ev testenv.Events[idemnats.Event]
			handler := func(ctx context.Context, msg jetstream.Msg) error {
				fx.Charge(msg.Headers().Get("Idempotency-Key"))
				return nil
			}
			for range 2 { // two consumer processes, each with its own Guard
				g := idemnatstest.Guard(t, store, idem.Config{Namespace: "dups"})
				idemnatstest.Run(t, g, cons, handler, idemnats.WithKeyHeader("Idempotency-Key"), idemnats.WithSharedScope(), idemnats.WithDiscardPoison(),
					idemnats.WithBatchSize(16), idemnats.WithConcurrency(2), idemnats.WithBusyDelay(20*time.Millisecond),
					idemnats.WithObserver(ev.Observe))
			}
			idemnatstest.WaitFor(t, 60*time.Second, "every copy acked", func() bool {
				return ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventAcked }) == keys*copies
			})
			idemnatstest.WaitFor(t, 10*time.Second, "the consumer drained", func() bool { return idemnatstest.Drained(t, cons) })
			for k := range keys {
				if n := fx.Count("order-" + strconv.Itoa(k)); n != 1 {
					t.Errorf("order-%d: %d effects, want 1", k, n)
				}
			}
			if n := ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventAcked && e.Replayed }); n != keys*(copies-1) {
				t.Errorf("%d copies acked as duplicates, want %d", n, keys*(copies-1))
			}
			if n := ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventDeadLettered }); n != 0 {
				t.Errorf("%d messages dead-lettered, want 0", n)
			}
		})
	}
}
