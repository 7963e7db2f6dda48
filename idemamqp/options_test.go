package idemamqp_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/memstore"
)

func newMemGuard(t *testing.T, cfg idem.Config) *idem.Guard {
	t.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	g, err := idem.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func nop(context.Context, amqp.Delivery) error { return nil }

const testURL = "amqp://guest:guest@127.0.0.1:5672/"

func TestNewRefusesBadConfiguration(t *testing.T) {
	g := newMemGuard(t, idem.Config{})
	shared := idemamqp.WithSharedScope()
	for _, tc := range []struct {
		name  string
		g     *idem.Guard
		url   string
		queue string
		h     idemamqp.Handler
		opts  []idemamqp.Option
		want  string // in the error
	}{
		{"nil Guard", nil, testURL, "q", nop, []idemamqp.Option{shared}, "Guard is nil"},
		{"nil handler", g, testURL, "q", nil, []idemamqp.Option{shared}, "Handler is nil"},
		{"no queue", g, testURL, "", nop, []idemamqp.Option{shared}, "queue name is empty"},
		{"long queue", g, testURL, strings.Repeat("q", 256), nop, []idemamqp.Option{shared}, "longer than 255"},
		{"bad URL", g, "http://x", "q", nop, []idemamqp.Option{shared}, "URL"},
		{"no scope decision", g, testURL, "q", nop, nil, "another tenant's key"},
		{"two scope decisions", g, testURL, "q", nop, []idemamqp.Option{shared,
			idemamqp.WithScope(func(amqp.Delivery) string { return "" })}, "choose one"},
		{"nil option", g, testURL, "q", nop, []idemamqp.Option{shared, nil}, "nil Option"},
		{"nil scope", g, testURL, "q", nop, []idemamqp.Option{idemamqp.WithScope(nil)}, "WithScope(nil)"},
		{"empty header", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithKeyHeader("")}, "WithKeyHeader"},
		{"nil key func", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithKeyFunc(nil)}, "WithKeyFunc(nil)"},
		{"nil fingerprint", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithFingerprint(nil)}, "WithFingerprint(nil)"},
		{"unkeyed", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithUnkeyed(9)}, "WithUnkeyed(9)"},
		{"prefetch 0", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithPrefetch(0)}, "WithPrefetch(0)"},
		{"prefetch too big", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithPrefetch(70000)}, "WithPrefetch(70000)"},
		{"concurrency 0", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithConcurrency(0)}, "WithConcurrency(0)"},
		{"concurrency above prefetch", g, testURL, "q", nop, []idemamqp.Option{shared,
			idemamqp.WithPrefetch(4), idemamqp.WithConcurrency(8)}, "WithConcurrency(8) is above the prefetch 4"},
		{"busy delay", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithBusyDelay(0)}, "WithBusyDelay(0s)"},
		{"retry delay", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithRetryDelay(-1)}, "WithRetryDelay(-1ns)"},
		{"long delay queue", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithDelayQueue(strings.Repeat("d", 256))}, "WithDelayQueue"},
		{"derived delay queue too long", g, testURL, strings.Repeat("q", 250), nop, []idemamqp.Option{shared}, "use WithDelayQueue"},
		{"shutdown", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithShutdownTimeout(-time.Second)}, "WithShutdownTimeout(-1s)"},
		{"backoff", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithReconnectBackoff(time.Second, time.Millisecond)}, "WithReconnectBackoff"},
		{"recovery", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithConfig(amqp.Config{Recovery: &amqp.Recovery{}})}, "Config.Recovery"},
		{"nil logger", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithLogger(nil)}, "WithLogger(nil)"},
		{"nil observer", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithObserver(nil)}, "WithObserver(nil)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := idemamqp.New(tc.g, tc.url, tc.queue, tc.h, tc.opts...)
			if err == nil || c != nil {
				t.Fatalf("New = %v, %v; want an error", c, err)
			}
			if !strings.HasPrefix(err.Error(), "idemamqp: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want one starting with \"idemamqp: \" that mentions %q", err, tc.want)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	g := newMemGuard(t, idem.Config{Logger: slog.New(slog.DiscardHandler)})
	c, err := idemamqp.New(g, testURL, "orders", nop, idemamqp.WithSharedScope())
	if err != nil {
		t.Fatal(err)
	}
	if c.Queue() != "orders" || c.DelayQueue() != "orders.idem-delay.1s" {
		t.Errorf("queue %q, delay queue %q; want orders, orders.idem-delay.1s", c.Queue(), c.DelayQueue())
	}
	c, err = idemamqp.New(g, testURL, "orders", nop, idemamqp.WithSharedScope(),
		idemamqp.WithBusyDelay(250*time.Millisecond), idemamqp.WithPrefetch(4))
	if err != nil {
		t.Fatalf("a prefetch below the default concurrency: %v", err)
	}
	if c.DelayQueue() != "orders.idem-delay.250ms" {
		t.Errorf("delay queue %q, want orders.idem-delay.250ms", c.DelayQueue())
	}
	c, err = idemamqp.New(g, testURL, "orders", nop, idemamqp.WithSharedScope(), idemamqp.WithDelayQueue(""))
	if err != nil || c.DelayQueue() != "" {
		t.Errorf("WithDelayQueue(\"\"): %v, delay queue %q; want none", err, c.DelayQueue())
	}
}

func TestEventKindString(t *testing.T) {
	if s := idemamqp.EventDeadLettered.String(); s != "dead_lettered" {
		t.Errorf("EventDeadLettered = %q", s)
	}
	if s := idemamqp.EventKind(99).String(); s != "EventKind(99)" {
		t.Errorf("EventKind(99) = %q", s)
	}
}
