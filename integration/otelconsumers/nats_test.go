package otelconsumers_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/idemnats/idemnatstest"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/internal/testenv"
)

// A JetStream consumer's messages, duplicates, retries and poison become
// idemotel's consumer metrics, with the stream and the JetStream consumer
// as attributes and NumPending as the lag.
func TestNATSConsumerMetrics(t *testing.T) {
	_, js := idemnatstest.Connect(t, idemnatstest.URL())
	stream := idemnatstest.NewStream(t, js, jetstream.StreamConfig{})
	name := stream.CachedInfo().Config.Name
	cons := idemnatstest.NewConsumer(t, stream, jetstream.ConsumerConfig{Durable: "charger"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Eight orders, one of them twice (a duplicate the Guard answers),
	// one whose first try fails, one without a key and one whose handler
	// fails for good: poison, discarded.
	publish := func(key string, id string) {
		m := &nats.Msg{Subject: name + ".orders", Data: []byte("order"), Header: nats.Header{jetstream.MsgIDHeader: {id}}}
		if key != "" {
			m.Header.Set("Idempotency-Key", key)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 8 {
		publish("order-"+string(rune('a'+i)), "m"+string(rune('a'+i)))
	}
	publish("order-a", "m-dup")
	publish("", "m-nokey")
	publish("order-declined", "m-declined")
	const messages = 11

	tel := newTelemetry(t)
	g := newGuard(t, tel, "charges")
	var seen activities
	metrics := idemotel.ConsumerObserver[idemnats.Event](tel.Telemetry, "")
	var failedOnce atomic.Bool
	c, err := idemnats.New(g, cons, func(ctx context.Context, msg jetstream.Msg) error {
		switch msg.Headers().Get("Idempotency-Key") {
		case "order-c":
			if failedOnce.CompareAndSwap(false, true) {
				return errors.New("payment provider timeout")
			}
		case "order-declined":
			return idem.Permanent(errors.New("card declined"))
		}
		return nil
	},
		idemnats.WithKeyHeader("Idempotency-Key"), idemnats.WithSharedScope(), idemnats.WithDiscardPoison(),
		idemnats.WithRetryBackoff(10*time.Millisecond, 10*time.Millisecond),
		idemnats.WithObserver(func(ctx context.Context, e idemnats.Event) {
			metrics(ctx, e)
			seen.add(e.Activity())
		}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testenv.WaitFor(t, 45*time.Second, "every message settled", func() bool {
		return seen.count(consumer.ActivityProcessed)+seen.count(consumer.ActivityDiscarded) == messages
	})

	if seen.maxLag < messages/2 {
		t.Errorf("the largest lag reported is %d; the first messages were delivered with %d or so behind them", seen.maxLag, messages-1)
	}
	got := tel.metrics(t)
	base := []string{"messaging.system=nats", "messaging.destination.name=" + name, "messaging.consumer.group.name=charger"}
	with := func(kv ...string) string { return attrs(append(kv, base...)...) }
	for _, c := range []struct {
		metric, attrs string
		want          int64
	}{
		{"idem.consumer.messages", with("idem.consumer.outcome=processed"), 8},
		{"idem.consumer.messages", with("idem.consumer.outcome=replayed"), 1},
		{"idem.consumer.messages", with("idem.consumer.outcome=discarded", "idem.consumer.reason=missing-key"), 1},
		{"idem.consumer.messages", with("idem.consumer.outcome=discarded", "idem.consumer.reason=permanent"), 1},
		{"idem.consumer.retries", with("idem.consumer.retry=error", "error.type=*errors.errorString"), 1},
		// Every message was delivered: the last one settled had none
		// pending behind it.
		{"idem.consumer.lag", attrs(base...), 0},
		// The Guard's own metrics, from the same Telemetry. (The
		// duplicate may be answered without a claim, when it shares its
		// batch with the original.)
		{"idem.claims", attrs("idem.namespace=charges", "idem.outcome=acquired"), 9},
		{"idem.claims", attrs("idem.namespace=charges", "idem.outcome=retried"), 1},
	} {
		if v, ok := got[c.metric][c.attrs]; !ok || v != c.want {
			t.Errorf("%s{%s} = %d (found %t), want %d; all: %v", c.metric, c.attrs, v, ok, c.want, got[c.metric])
		}
	}
	if n := len(got["idem.consumer.messages"]); n != 4 {
		t.Errorf("%d series of idem.consumer.messages, want 4: %v", n, got["idem.consumer.messages"])
	}
}
