package idemnats_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
)

// failing is a handler that counts its runs by Nats-Msg-Id in fx and
// always fails.
func failing(fx *effects) idemnats.Handler {
	return func(_ context.Context, msg jetstream.Msg) error {
		fx.add(msg.Headers().Get(jetstream.MsgIDHeader))
		return errors.New("the payment provider timed out")
	}
}

func discarded(e idemnats.Event) bool { return e.Kind == idemnats.EventDiscarded }

// WithMaxAttempts bounds every key by the store's count of its claims, not
// by the consumer's memory: with more failing messages than the consumer's
// count of failures holds, no key's handler runs more than MaxAttempts
// times (a storm used to run them without end as the count forgot them).
func TestMaxAttemptsBoundsAStorm(t *testing.T) {
	t.Parallel()
	const n, maxAttempts = 40, 3
	cons := orders(t, n)
	g := newGuard(t, memStore(t), idem.Config{})
	var fx effects
	var ev events
	c, err := idemnats.New(g, cons, failing(&fx), idemnats.WithSharedScope(), idemnats.WithDiscardPoison(),
		idemnats.WithMaxAttempts(maxAttempts), idemnats.WithBatchSize(n),
		idemnats.WithRetryBackoff(time.Millisecond, 5*time.Millisecond), idemnats.WithObserver(ev.Observe))
	if err != nil {
		t.Fatal(err)
	}
	idemnats.SetTriesTable(c, 2)
	start(t, c)
	over := func() (string, int) {
		for i := range n {
			if k := "order-" + strconv.Itoa(i); fx.get(k) > maxAttempts {
				return k, fx.get(k)
			}
		}
		return "", 0
	}
	waitFor(t, 60*time.Second, "every message discarded, or a key run too often", func() bool {
		k, _ := over()
		return k != "" || ev.Count(discarded) >= n
	})
	if k, runs := over(); k != "" {
		t.Fatalf("%s: the handler ran %d times, more than WithMaxAttempts(%d)", k, runs, maxAttempts)
	}
	for i := range n {
		if k := "order-" + strconv.Itoa(i); fx.get(k) != maxAttempts {
			t.Errorf("%s: the handler ran %d times, want %d", k, fx.get(k), maxAttempts)
		}
	}
}

// A consumer that restarts does not start the count of a failing key
// again: the store keeps it.
func TestMaxAttemptsSurvivesARestart(t *testing.T) {
	t.Parallel()
	const maxAttempts = 3
	cons := orders(t, 1)
	g := newGuard(t, memStore(t), idem.Config{})
	var fx effects
	opts := []idemnats.Option{idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithMaxAttempts(maxAttempts)}
	// The first consumer: two failures, then it stops before the
	// redelivery a second away.
	stop := run(t, g, cons, failing(&fx), append(opts, idemnats.WithRetryBackoff(time.Second, time.Second))...)
	waitFor(t, 30*time.Second, "two runs", func() bool { return fx.get("order-0") >= 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if runs := fx.get("order-0"); runs != 2 {
		t.Fatalf("the first consumer ran the handler %d times, want 2", runs)
	}
	var ev events
	run(t, g, cons, failing(&fx), append(opts, idemnats.WithRetryBackoff(time.Millisecond, time.Millisecond),
		idemnats.WithObserver(ev.Observe))...)
	waitFor(t, 30*time.Second, "the message discarded", func() bool { return ev.Count(discarded) == 1 })
	if runs := fx.get("order-0"); runs != maxAttempts {
		t.Fatalf("the handler ran %d times across a restart, want WithMaxAttempts, %d", runs, maxAttempts)
	}
}
