package natsstores_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/idemnats/idemnatstest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

// A message whose key Redis answers for but the store refuses (the key
// holds a hash another program wrote) is not an outage: the consumer
// counts each refusal as an attempt and dead-letters the message after
// MaxAttempts, instead of requeuing it without end, and the messages
// around it are handled.
func TestRefusedKeyIsDeadLetteredAfterItsAttempts(t *testing.T) {
	t.Parallel()
	rdb := redisstoretest.Client(t)
	store := redisstoretest.Store(t, rdb, redisstore.Config{})
	const ns = "refused"
	hash := store.RedisKey(storage.StoreKey(ns, "order-hash"))
	if err := rdb.HSet(context.Background(), hash, "status", "completed").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), hash) })

	_, js := idemnatstest.Connect(t, idemnatstest.URL())
	s := idemnatstest.NewStream(t, js, jetstream.StreamConfig{})
	dlq := idemnatstest.NewStream(t, js, jetstream.StreamConfig{})
	cons := idemnatstest.NewConsumer(t, s, jetstream.ConsumerConfig{})
	for _, key := range []string{"order-1", "order-hash", "order-2"} {
		idemnatstest.Publish(t, js, idemnatstest.Subject(s, "orders"), "body of "+key, "Idempotency-Key", key)
	}
	var fx testenv.Ledger
	var ev testenv.Events[idemnats.Event]
	var refusedTries atomic.Int32
	g := idemnatstest.Guard(t, store, idem.Config{Namespace: ns})
	idemnatstest.Run(t, g, cons, func(ctx context.Context, msg jetstream.Msg) error {
		fx.Charge(msg.Headers().Get("Idempotency-Key"))
		return nil
	}, idemnats.WithKeyHeader("Idempotency-Key"), idemnats.WithSharedScope(),
		idemnats.WithDeadLetter(js, idemnatstest.Subject(dlq, "dead")), idemnats.WithMaxAttempts(3),
		idemnats.WithRetryBackoff(10*time.Millisecond, 20*time.Millisecond),
		idemnats.WithObserver(func(ctx context.Context, e idemnats.Event) {
			if e.Key == "order-hash" && errors.Is(e.Err, idem.ErrRefused) && e.Kind != idemnats.EventDeadLettered {
				refusedTries.Add(1)
			}
			ev.Observe(ctx, e)
		}))
	deadLettered := func(e idemnats.Event) bool {
		return e.Kind == idemnats.EventDeadLettered && e.Key == "order-hash" && e.Reason == consumer.ReasonTooManyAttempts && errors.Is(e.Err, idem.ErrRefused)
	}
	idemnatstest.WaitFor(t, 30*time.Second, "the refused message dead-lettered and the stream drained", func() bool {
		return ev.Count(deadLettered) == 1 && idemnatstest.Drained(t, cons)
	})
	if n := refusedTries.Load(); n != 2 {
		t.Errorf("%d refusals retried before the dead letter, want 2 (3 attempts in all)", n)
	}
	for _, key := range []string{"order-1", "order-2"} {
		if n := fx.Count(key); n != 1 {
			t.Errorf("%s: %d effects, want 1", key, n)
		}
	}
	if n := fx.Count("order-hash"); n != 0 {
		t.Errorf("the refused key ran %d times, want 0", n)
	}
	if n := ev.Count(func(e idemnats.Event) bool { return errors.Is(e.Err, idem.ErrStoreUnavailable) }); n != 0 {
		t.Errorf("%d events took the refusal for an outage", n)
	}
}
