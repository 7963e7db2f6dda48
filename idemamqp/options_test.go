package idemamqp_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/idemamqp/idemamqptest"
	"github.com/idemgo/idem/internal/adaptertest"
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
	discard := idemamqp.WithDiscardPoison()
	for _, tc := range []struct {
		name  string
		g     *idem.Guard
		url   string
		queue string
		h     idemamqp.Handler
		opts  []idemamqp.Option
		want  string // in the error
	}{
		{"nil Guard", nil, testURL, "q", nop, []idemamqp.Option{shared, discard, discard}, "Guard is nil"},
		{"nil handler", g, testURL, "q", nil, []idemamqp.Option{shared, discard, discard}, "Handler is nil"},
		{"no queue", g, testURL, "", nop, []idemamqp.Option{shared, discard, discard}, "queue name is empty"},
		{"long queue", g, testURL, strings.Repeat("q", 256), nop, []idemamqp.Option{shared, discard, discard}, "longer than 255"},
		{"bad URL", g, "http://x", "q", nop, []idemamqp.Option{shared, discard, discard}, "URL"},
		{"no scope decision", g, testURL, "q", nop, []idemamqp.Option{discard}, "another tenant's key"},
		{"no poison decision", g, testURL, "q", nop, []idemamqp.Option{shared}, "no poison decision"},
		{"two poison decisions", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithDeadLetter("dlx", "")}, "choose one"},
		{"long dead-letter exchange", g, testURL, "q", nop, []idemamqp.Option{shared, idemamqp.WithDeadLetter(strings.Repeat("x", 256), "")}, "WithDeadLetter"},
		{"two scope decisions", g, testURL, "q", nop, []idemamqp.Option{shared, discard,
			idemamqp.WithScope(func(amqp.Delivery) string { return "" })}, "choose one"},
		{"nil option", g, testURL, "q", nop, []idemamqp.Option{shared, discard, nil}, "nil Option"},
		{"nil scope", g, testURL, "q", nop, []idemamqp.Option{discard, idemamqp.WithScope(nil)}, "WithScope(nil)"},
		{"empty header", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithKeyHeader("")}, "WithKeyHeader"},
		{"nil key func", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithKeyFunc(nil)}, "WithKeyFunc(nil)"},
		{"nil fingerprint", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithFingerprint(nil)}, "WithFingerprint(nil)"},
		{"key header too long", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithKeyHeader(strings.Repeat("h", 256))}, "WithKeyHeader"},
		{"max attempts", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithMaxAttempts(0)}, "WithMaxAttempts(0)"},
		{"max message size", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithMaxMessageSize(100)}, "WithMaxMessageSize(100)"},
		{"prefetch 0", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithPrefetch(0)}, "WithPrefetch(0)"},
		{"prefetch too big", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithPrefetch(70000)}, "WithPrefetch(70000)"},
		{"concurrency 0", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithConcurrency(0)}, "WithConcurrency(0)"},
		{"concurrency above prefetch", g, testURL, "q", nop, []idemamqp.Option{shared, discard,
			idemamqp.WithPrefetch(4), idemamqp.WithConcurrency(8)}, "WithConcurrency(8) is above the prefetch 4"},
		{"busy delay", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithBusyDelay(time.Microsecond)}, "WithBusyDelay(1µs)"},
		{"retry backoff", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithRetryBackoff(0, time.Second)}, "WithRetryBackoff(0s, 1s)"},
		{"retry backoff order", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithRetryBackoff(time.Second, time.Millisecond)}, "longer than the longest"},
		{"long delay queue", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithDelayQueue(strings.Repeat("d", 256))}, "WithDelayQueue"},
		{"derived delay queue too long", g, testURL, strings.Repeat("q", 250), nop, []idemamqp.Option{shared, discard, discard}, "use WithDelayQueue"},
		{"drain", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithDrainTimeout(-time.Second)}, "WithDrainTimeout(-1s)"},
		{"backoff", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithReconnectBackoff(time.Second, time.Millisecond)}, "WithReconnectBackoff"},
		{"recovery", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithConfig(amqp.Config{Recovery: &amqp.Recovery{}})}, "Config.Recovery"},
		{"nil logger", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithLogger(nil)}, "WithLogger(nil)"},
		{"nil observer", g, testURL, "q", nop, []idemamqp.Option{shared, discard, idemamqp.WithObserver(nil)}, "WithObserver(nil)"},
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

// A consumer without a scope decision would let one tenant's key suppress
// another's delivery: New refuses it, and says what to do.
func TestNewRequiresAScopeDecision(t *testing.T) {
	_, err := idemamqp.New(newMemGuard(t, idem.Config{}), testURL, "q", nop, idemamqp.WithDiscardPoison())
	adaptertest.CheckConsumerNoScope(t, err, "idemamqp", "amqp.Delivery")
}

func TestNewDefaults(t *testing.T) {
	g := newMemGuard(t, idem.Config{Logger: slog.New(slog.DiscardHandler)})
	c, err := idemamqp.New(g, testURL, "orders", nop, idemamqp.WithSharedScope(), idemamqp.WithDiscardPoison())
	if err != nil {
		t.Fatal(err)
	}
	if c.Queue() != "orders" || c.DelayQueue() != "orders.idem-delay.1s" {
		t.Errorf("queue %q, delay queue %q; want orders, orders.idem-delay.1s", c.Queue(), c.DelayQueue())
	}
	c, err = idemamqp.New(g, testURL, "orders", nop, idemamqp.WithSharedScope(), idemamqp.WithDiscardPoison(),
		idemamqp.WithBusyDelay(250*time.Millisecond), idemamqp.WithPrefetch(4))
	if err != nil {
		t.Fatalf("a prefetch below the default concurrency: %v", err)
	}
	if c.DelayQueue() != "orders.idem-delay.250ms" {
		t.Errorf("delay queue %q, want orders.idem-delay.250ms", c.DelayQueue())
	}
	c, err = idemamqp.New(g, testURL, "orders", nop, idemamqp.WithSharedScope(), idemamqp.WithDiscardPoison(), idemamqp.WithDelayQueue(""))
	if err != nil || c.DelayQueue() != "" {
		t.Errorf("WithDelayQueue(\"\"): %v, delay queue %q; want none", err, c.DelayQueue())
	}
}

func TestEventKindString(t *testing.T) {
	for k, want := range map[idemamqp.EventKind]string{idemamqp.EventDeadLettered: "dead_lettered",
		idemamqp.EventDiscarded: "discarded", idemamqp.EventUnsettled: "unsettled"} {
		if s := k.String(); s != want {
			t.Errorf("%d.String() = %q, want %q", k, s, want)
		}
	}
	if s := idemamqp.EventKind(99).String(); s != "EventKind(99)" {
		t.Errorf("EventKind(99) = %q", s)
	}
}

// No error of New shows the URL's password, and neither do the consumer's
// log lines when the broker cannot be reached.
func TestURLPasswordNeverShown(t *testing.T) {
	g := newMemGuard(t, idem.Config{})
	const secret = "s3cr%21t"
	for _, url := range []string{
		"amqp://guest:" + secret + "@127.0.0.1:notaport/",
		"amqp://guest:" + secret + "%zz@127.0.0.1/",
		"amqp://guest:" + secret + "@127.0.0.1/vhost with space",
		"http://guest:" + secret + "@127.0.0.1/",
		// A password with an unescaped "/", "#" or "?": url.Parse stops at
		// it, and amqp091's error quotes what it stopped at.
		"amqp://guest:s3cr/et@127.0.0.1/",
		"amqp://guest:s3cr#et@127.0.0.1/",
		"amqp://guest:s3cr?et@127.0.0.1/",
	} {
		_, err := idemamqp.New(g, url, "q", nop, idemamqp.WithSharedScope(), idemamqp.WithDiscardPoison())
		if err == nil {
			t.Errorf("New(%q) accepted the URL", url)
			continue
		}
		if strings.Contains(err.Error(), "s3cr") {
			t.Errorf("New's error shows the password: %v", err)
		}
		if !strings.Contains(err.Error(), "guest") {
			t.Errorf("New's error %q does not say which URL", err)
		}
	}

	// A broker that refuses the connection: the logs of the attempts.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	var logs adaptertest.Logs
	c, err := idemamqp.New(g, "amqp://guest:"+secret+"@"+addr+"/", "q", nop, idemamqp.WithSharedScope(), idemamqp.WithDiscardPoison(),
		idemamqp.WithReconnectBackoff(10*time.Millisecond, 20*time.Millisecond),
		idemamqp.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	idemamqptest.Eventually(t, 10*time.Second, "two attempts to connect logged", func() bool {
		return strings.Count(logs.String(), "cannot connect") >= 2
	})
	cancel()
	<-done
	if strings.Contains(logs.String(), "s3cr") || !strings.Contains(logs.String(), "guest:xxxxx@"+addr) {
		t.Errorf("the logs show the password, or not the URL without it:\n%s", logs.String())
	}
}
