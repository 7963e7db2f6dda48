package outboxamqp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/amqppub"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(relayChild())
	}
	goleak.VerifyTestMain(m)
}

// rabbit is the shared RabbitMQ of this machine.
var (
	rabbit  = testenv.Server{Name: "RabbitMQ", Env: "IDEM_AMQP_URL", Default: "amqp://guest:guest@127.0.0.1:5672/"}
	amqpURL = rabbit.Addr()
)

// dial connects to amqpURL, closed when t ends; it skips or fails t when
// the broker cannot be reached.
func dial(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		rabbit.Unreachable(t, redact(amqpURL), err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// declareQueue declares a queue of t's own, deleted when t ends, and
// returns its name: the routing key of the default exchange that reaches it.
func declareQueue(t testing.TB, conn *amqp.Connection) string {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("outboxtest."+outboxtest.NewRunID(), true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil && !conn.IsClosed() {
			t.Errorf("delete queue %s: %v", q.Name, err)
		}
		ch.Close()
	})
	return q.Name
}

// consume delivers queue's messages on the channel returned, acknowledged
// on receipt, until t ends.
func consume(t testing.TB, conn *amqp.Connection, queue string) <-chan outboxtest.Received {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan outboxtest.Received, 10000)
	var wg sync.WaitGroup
	wg.Go(func() {
		for d := range deliveries {
			got <- received(d)
		}
	})
	t.Cleanup(func() {
		ch.Close() // ends deliveries
		wg.Wait()
	})
	return got
}

// redact returns rawURL without its password, for messages.
func redact(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Redacted()
	}
	return "(not a URL)"
}

func received(d amqp.Delivery) outboxtest.Received {
	h := map[string]string{}
	for name, v := range d.Headers {
		h[name] = fmt.Sprint(v)
	}
	return outboxtest.Received{ID: d.MessageId, Headers: h, Payload: d.Body}
}

func newPublisher(t testing.TB, rawURL string, opts ...amqppub.Option) *amqppub.Publisher {
	t.Helper()
	pub, err := amqppub.New(rawURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return pub
}

func TestPublisher(t *testing.T) {
	outboxtest.TestPublisher(t, func(t *testing.T) outboxtest.Broker {
		conn := dial(t)
		return outboxtest.Broker{
			Publisher: newPublisher(t, amqpURL),
			Destination: func(t *testing.T) (string, <-chan outboxtest.Received) {
				q := declareQueue(t, conn)
				return q, consume(t, conn, q)
			},
			Poisons: []outboxtest.Poison{
				// RabbitMQ's frame_max is 128 KiB by default: 40 headers of
				// 4,000 bytes do not fit in the one frame properties travel in.
				{Name: "HeadersOverFrameMax", Message: func(dest string) outbox.Message {
					h := map[string]string{}
					for i := range 40 {
						h[fmt.Sprintf("X-Big-%d", i)] = strings.Repeat("h", 4000)
					}
					return outbox.Message{Destination: dest, Headers: h, Payload: []byte("poison")}
				}, Err: "frame"},
				// The content-type property holds at most 255 bytes.
				{Name: "ContentTypeOver255Bytes", Message: func(dest string) outbox.Message {
					h := map[string]string{"Content-Type": strings.Repeat("t", 300)}
					return outbox.Message{Destination: dest, Headers: h, Payload: []byte("poison")}
				}, Err: "Content-Type"},
				// RabbitMQ routes by a CC or BCC header of an array only,
				// and closes the channel for one of another type.
				{Name: "CCHeader", Message: func(dest string) outbox.Message {
					return outbox.Message{Destination: dest, Headers: map[string]string{"CC": dest}, Payload: []byte("poison")}
				}, Err: "CC"},
			},
		}
	})
}

func publishCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// TestAnUnroutableMessageFails: a message no queue takes comes back, and
// fails; the next of its key is held back; other keys go through.
func TestAnUnroutableMessageFails(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := declareQueue(t, conn)
	got := consume(t, conn, q)
	pub := newPublisher(t, amqpURL, amqppub.WithIDHeader("idempotency-key"))
	err := pub.Publish(publishCtx(t), []outbox.Message{
		{ID: "lost", Destination: "outboxtest.nowhere." + outboxtest.NewRunID(), Key: "k"},
		{ID: "behind", Destination: q, Key: "k"},
		{ID: "other", Destination: q, Key: "j", Headers: map[string]string{"Content-Type": "text/plain"}},
	})
	pe, ok := errors.AsType[*outbox.PublishError](err)
	switch {
	case !ok:
		t.Fatalf("Publish = %v, want a *PublishError", err)
	case !errors.Is(pe.Errs[0], amqppub.ErrUnroutable):
		t.Errorf("unroutable message: %v, want ErrUnroutable", pe.Errs[0])
	case !errors.Is(pe.Errs[1], outbox.ErrHeldBack):
		t.Errorf("the next of its key: %v, want ErrHeldBack", pe.Errs[1])
	case pe.Errs[2] != nil:
		t.Errorf("another key's message: %v, want nil", pe.Errs[2])
	}
	select {
	case r := <-got:
		if r.ID != "other" || r.Headers["idempotency-key"] != "other" {
			t.Errorf("received %+v, want message other with its ID in the idempotency-key header", r)
		}
	case <-time.After(outboxtest.Timeout):
		t.Fatal("nothing received")
	}
}

// proxy forwards TCP connections to a broker, and can cut them all and
// refuse new ones: a broker outage, for this test's connections only.
type proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	down   bool
	wg     sync.WaitGroup
}

// proxiedBroker starts a proxy to the shared broker, and returns it and
// the broker's URL through it.
func proxiedBroker(t *testing.T) (*proxy, string) {
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, u.Host)
	u.Host = px.l.Addr().String()
	return px, u.String()
}

func newProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		l.Close()
		p.setDown(true)
		p.wg.Wait()
	})
	return p
}

func (p *proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Go(func() { io.Copy(up, c); up.Close() })
		p.wg.Go(func() { io.Copy(c, up); c.Close() })
	}
}

// setDown cuts every connection and refuses new ones (down), or accepts
// again.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// TestRedialsAfterTheBrokerWasDown: while the broker cannot be reached,
// Publish fails, as unavailable (no attempt of the message); once it can,
// the next Publish dials again and succeeds.
func TestRedialsAfterTheBrokerWasDown(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := declareQueue(t, conn)
	got := consume(t, conn, q)
	px, pxURL := proxiedBroker(t)
	pub := newPublisher(t, pxURL)
	ctx := publishCtx(t)
	msg := func(id string) []outbox.Message { return []outbox.Message{{ID: id, Destination: q}} }
	if err := pub.Publish(ctx, msg("before")); err != nil {
		t.Fatal(err)
	}
	px.setDown(true)
	for _, id := range []string{"down-1", "down-2"} {
		if err := pub.Publish(ctx, msg(id)); !errors.Is(err, amqppub.ErrConnection) || !outbox.IsUnavailable(err) {
			t.Errorf("Publish while the broker is down = %v, want ErrConnection, unavailable", err)
		}
	}
	px.setDown(false)
	if err := pub.Publish(ctx, msg("after")); err != nil {
		t.Fatalf("Publish once the broker is back = %v", err)
	}
	var ids []string
	for len(ids) < 2 {
		select {
		case r := <-got:
			ids = append(ids, r.ID)
		case <-ctx.Done():
			t.Fatalf("received %q, want before and after", ids)
		}
	}
	if strings.Join(ids, ",") != "before,after" {
		t.Errorf("received %q, want before and after", ids)
	}
}

// TestRelayThroughABrokerOutage: the broker cannot be reached (the proxy
// cuts the relay's connections and refuses new ones) for several failed
// publishes, more than MaxAttempts (2) would allow were they counted, while
// messages are enqueued before, during and after. No row dies; once the
// broker is back the queue gets every message, each key's in order.
func TestRelayThroughABrokerOutage(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := declareQueue(t, conn)
	got := consume(t, conn, q)
	px, pxURL := proxiedBroker(t)
	pool := pgstoretest.Pool(t, 4)
	table := outboxtest.Table(t, pool)
	var sent, failedCalls atomic.Int64
	relay, err := outbox.NewRelay(pool, newPublisher(t, pxURL), outbox.RelayConfig{
		Table: table, BatchSize: 20, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		PublishTimeout: 5 * time.Second, MaxAttempts: 2,
		Observer: func(_ context.Context, e outbox.Event) {
			sent.Add(int64(e.Sent))
			if e.Op == outbox.OpPublish && e.Failed > 0 {
				failedCalls.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RunRelay(t, relay)
	msgs, want := outboxtest.Messages(150, 5, q)
	outboxtest.Enqueue(t, pool, table, msgs[:50], 2)
	testenv.WaitFor(t, outboxtest.Timeout, "50 sent", func() bool { return sent.Load() >= 50 })
	px.setDown(true)
	outboxtest.Enqueue(t, pool, table, msgs[50:100], 2)
	testenv.WaitFor(t, outboxtest.Timeout, "4 failed publishes", func() bool { return failedCalls.Load() >= 4 })
	px.setDown(false)
	outboxtest.Enqueue(t, pool, table, msgs[100:], 2)
	outboxtest.AwaitPending(t, pool, table, 0)
	dead, err := outbox.Dead(publishCtx(t), pool, table, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		t.Errorf("dead row %s after %d attempts: %s", d.Message.ID, d.Attempts, d.LastError)
	}
	var ids []string
	seen := map[string]bool{}
	timeout := time.After(outboxtest.Timeout)
	for len(seen) < len(msgs) {
		select {
		case r := <-got:
			ids = append(ids, r.ID)
			seen[r.ID] = true
		case <-timeout:
			t.Fatalf("received %d distinct of %d messages", len(seen), len(msgs))
		}
	}
	dups := outboxtest.CheckOrder(t, want, ids)
	t.Logf("%d failed publishes, %d duplicates", failedCalls.Load(), dups)
}

func TestNewRefusesBadArguments(t *testing.T) {
	for _, tc := range []struct {
		url  string
		opts []amqppub.Option
	}{
		{"http://x", nil},
		{"::", nil},
		{amqpURL, []amqppub.Option{amqppub.WithExchange(strings.Repeat("x", 256))}},
		{amqpURL, []amqppub.Option{amqppub.WithIDHeader("")}},
		{amqpURL, []amqppub.Option{nil}},
	} {
		if _, err := amqppub.New(tc.url, tc.opts...); err == nil || !strings.HasPrefix(err.Error(), "amqppub: ") {
			t.Errorf("New(%q, …) = %v, want an amqppub error", tc.url, err)
		}
	}
	pub, err := amqppub.New(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	pub.Close()
	pub.Close()
	if err := pub.Publish(context.Background(), []outbox.Message{{ID: "x", Destination: "y"}}); !errors.Is(err, amqppub.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}
