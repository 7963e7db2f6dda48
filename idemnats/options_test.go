package idemnats_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/internal/adaptertest"
)

// fakeConsumer is a jetstream.Consumer whose configuration is known
// without a server; New reads nothing else.
type fakeConsumer struct {
	jetstream.Consumer
	info *jetstream.ConsumerInfo
}

func (f fakeConsumer) CachedInfo() *jetstream.ConsumerInfo { return f.info }

func explicitConsumer() fakeConsumer {
	return fakeConsumer{info: &jetstream.ConsumerInfo{Name: "workers", Config: jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy}}}
}

func nopHandler(context.Context, jetstream.Msg) error { return nil }

func TestNewRefusesBadConfiguration(t *testing.T) {
	g := newGuard(t, memStore(t), idem.Config{})
	shared := idemnats.WithSharedScope()
	discard := idemnats.WithDiscardPoison()
	cases := []struct {
		name string
		g    *idem.Guard
		c    jetstream.Consumer
		h    idemnats.Handler
		opts []idemnats.Option
		want string // in the error
	}{
		{"nil guard", nil, explicitConsumer(), nopHandler, []idemnats.Option{shared}, "Guard is nil"},
		{"nil consumer", g, nil, nopHandler, []idemnats.Option{shared}, "Consumer is nil"},
		{"nil handler", g, explicitConsumer(), nil, []idemnats.Option{shared}, "Handler is nil"},
		{"nil option", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, nil}, "nil Option"},
		{"ack none", g, fakeConsumer{info: &jetstream.ConsumerInfo{Name: "w", Config: jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}}},
			nopHandler, []idemnats.Option{shared, discard}, "AckPolicy AckNone"},
		{"ack all", g, fakeConsumer{info: &jetstream.ConsumerInfo{Name: "w", Config: jetstream.ConsumerConfig{AckPolicy: jetstream.AckAllPolicy}}},
			nopHandler, []idemnats.Option{shared, discard}, "AckPolicy AckAll"},
		{"two scopes", g, explicitConsumer(), nopHandler,
			[]idemnats.Option{shared, idemnats.WithScope(func(jetstream.Msg) string { return "" })}, "WithScope and WithSharedScope"},
		{"empty key header", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithKeyHeader("")}, "WithKeyHeader"},
		{"key header with colon", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithKeyHeader("a:b")}, "WithKeyHeader"},
		{"nil key func", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithKeyFunc(nil)}, "WithKeyFunc(nil)"},
		{"nil fingerprint", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithFingerprint(nil)}, "WithFingerprint(nil)"},
		{"nil scope", g, explicitConsumer(), nopHandler, []idemnats.Option{idemnats.WithScope(nil)}, "WithScope(nil)"},
		{"nil dead-letter js", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithDeadLetter(nil, "dlq")}, "JetStream is nil"},
		{"wildcard dead-letter subject", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithDeadLetter(fakeJS{}, "dlq.>")}, "WithDeadLetter"},
		{"no poison decision", g, explicitConsumer(), nopHandler, []idemnats.Option{shared}, "no poison decision. Pass WithDeadLetter(js, subject)"},
		{"two poison decisions", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, discard, idemnats.WithDeadLetter(fakeJS{}, "dlq")}, "choose one"},
		{"max attempts 0", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, discard, idemnats.WithMaxAttempts(0)}, "WithMaxAttempts(0)"},
		{"backoff first above longest", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, discard, idemnats.WithRetryBackoff(time.Second, time.Millisecond)}, "WithRetryBackoff"},
		{"batch 0", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithBatchSize(0)}, "WithBatchSize(0)"},
		{"concurrency 0", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithConcurrency(0)}, "WithConcurrency(0)"},
		{"fetch wait 1ms", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithFetchWait(time.Millisecond)}, "WithFetchWait(1ms)"},
		{"zero busy delay", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithBusyDelay(0)}, "WithBusyDelay"},
		{"negative retry backoff", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithRetryBackoff(-1, time.Second)}, "WithRetryBackoff"},
		{"negative drain timeout", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithDrainTimeout(-1)}, "WithDrainTimeout"},
		{"nil logger", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithLogger(nil)}, "WithLogger(nil)"},
		{"nil observer", g, explicitConsumer(), nopHandler, []idemnats.Option{shared, idemnats.WithObserver(nil)}, "WithObserver(nil)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := idemnats.New(tc.g, tc.c, tc.h, tc.opts...)
			if err == nil || c != nil {
				t.Fatalf("New = %v, %v; want an error", c, err)
			}
			if !strings.HasPrefix(err.Error(), "idemnats: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q: want it to start with idemnats: and say %q", err, tc.want)
			}
		})
	}
}

// fakeJS stands for a JetStream in option checks that never publish.
type fakeJS struct{ jetstream.JetStream }

// A consumer without a scope decision would let one tenant's key suppress
// another's message: New refuses it, and says what to do.
func TestNewRequiresAScopeDecision(t *testing.T) {
	g := newGuard(t, memStore(t), idem.Config{})
	_, err := idemnats.New(g, explicitConsumer(), nopHandler, idemnats.WithDiscardPoison())
	adaptertest.CheckConsumerNoScope(t, err, "idemnats", "jetstream.Msg")
	for _, opt := range []idemnats.Option{
		idemnats.WithSharedScope(),
		idemnats.WithScope(func(m jetstream.Msg) string { return m.Subject() }),
	} {
		if _, err := idemnats.New(g, explicitConsumer(), nopHandler, opt, idemnats.WithDiscardPoison(), idemnats.WithLogger(slog.Default())); err != nil {
			t.Errorf("New with a scope decision: %v", err)
		}
	}
}

// The same key in two scopes is two operations: each tenant's message is
// handled, and neither is acked as the other's duplicate; a tenant's own
// duplicate is.
func TestScopesKeepTenantsApart(t *testing.T) {
	t.Parallel()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{})
	var fx effects
	var ev events
	tenant := func(m jetstream.Msg) string {
		_, rest, _ := strings.Cut(m.Subject(), ".") // <stream>.<tenant>.orders
		t, _, _ := strings.Cut(rest, ".")
		return t
	}
	c, err := idemnats.New(newGuard(t, memStore(t), idem.Config{}), cons, func(ctx context.Context, msg jetstream.Msg) error {
		fx.add(tenant(msg) + "/" + msg.Headers().Get("Idempotency-Key"))
		return nil
	}, idemnats.WithScope(tenant), idemnats.WithDiscardPoison(), idemnats.WithKeyHeader("Idempotency-Key"), idemnats.WithObserver(ev.Observe))
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	publish(t, js, subject(s, "acme.orders"), "o", "Idempotency-Key", "order-1")
	publish(t, js, subject(s, "globex.orders"), "o", "Idempotency-Key", "order-1")
	publish(t, js, subject(s, "globex.orders"), "o", "Idempotency-Key", "order-1")
	waitFor(t, 10*time.Second, "the three messages acked", func() bool {
		return ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventAcked }) == 3
	})
	if fx.get("acme/order-1") != 1 || fx.get("globex/order-1") != 1 || fx.keys() != 2 {
		t.Fatalf("effects %v, want one per tenant", fx.n)
	}
	if n := ev.Count(func(e idemnats.Event) bool { return e.Replayed && e.Scope == "globex" }); n != 1 {
		t.Fatalf("%d of globex's messages acked as duplicates, want 1", n)
	}
}

// A handler that panics releases its key and its message comes back; the
// process goes on.
func TestHandlerPanicIsRetried(t *testing.T) {
	t.Parallel()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{})
	var calls counter
	var ev events
	run(t, newGuard(t, memStore(t), idem.Config{}), cons, func(ctx context.Context, msg jetstream.Msg) error {
		if calls.Add(1) == 1 {
			panic("nil map")
		}
		return nil
	}, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithRetryBackoff(10*time.Millisecond, 10*time.Millisecond),
		idemnats.WithObserver(ev.Observe))
	publish(t, js, subject(s, "x"), "x", jetstream.MsgIDHeader, "p-1")
	waitFor(t, 10*time.Second, "the message acked on its second delivery", func() bool { return drained(t, cons) && calls.Load() == 2 })
	var pe *consumer.PanicError
	if n := ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventRequeued && errors.As(e.Err, &pe) }); n != 1 {
		t.Fatalf("%d retries with a PanicError, want 1", n)
	}
	if pe.Value != "nil map" || len(pe.Stack) == 0 {
		t.Fatalf("PanicError %v with a stack of %d bytes", pe.Value, len(pe.Stack))
	}
}

// Run returns ErrConsumerDeleted when the consumer is deleted under it.
func TestRunStopsWhenConsumerDeleted(t *testing.T) {
	t.Parallel()
	_, s, cons := fixture(t, jetstream.ConsumerConfig{})
	c, err := idemnats.New(newGuard(t, memStore(t), idem.Config{}), cons, nopHandler, idemnats.WithSharedScope(), idemnats.WithDiscardPoison())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	// Delete once a fetch is waiting: the server ends it with 409.
	waitFor(t, 10*time.Second, "a pull request waiting", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumWaiting > 0
	})
	if err := s.DeleteConsumer(ctx, "workers"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, idemnats.ErrConsumerDeleted) {
		t.Fatalf("Run = %v, want ErrConsumerDeleted", err)
	}
}

// Run returns idem.ErrClosed when its Guard is closed under it, and hands
// the message it could not claim back.
func TestRunStopsWhenGuardClosed(t *testing.T) {
	t.Parallel()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{})
	g, err := idem.New(memStore(t), idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := idemnats.New(g, cons, nopHandler, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithFetchWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	publish(t, js, subject(s, "x"), "x", jetstream.MsgIDHeader, "k")
	if err := <-done; !errors.Is(err, idem.ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	// Handed back: the next fetch gets it again, long before AckWait.
	msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("the message did not come back: %v", err)
	}
	if md, _ := msg.Metadata(); md == nil || md.NumDelivered != 2 {
		t.Fatalf("the message came back with metadata %+v, want its second delivery", md)
	}
	msg.Ack()
}
