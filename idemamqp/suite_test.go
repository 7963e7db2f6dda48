package idemamqp_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/consumer/consumertest"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/idemamqp/idemamqptest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

// The store suite of idemamqptest over memstore; integration/amqpstores
// runs it over Redis and PostgreSQL.
func TestSuiteMemstore(t *testing.T) {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	idemamqptest.Run(t, func(*testing.T) storage.Store { return s })
}

// The behaviour suite every idem consumer passes, on the RabbitMQ of
// IDEM_AMQP_URL.
func TestConsumerSuite(t *testing.T) { consumertest.Run(t, rabbitMQ{}) }

// rabbitMQ is consumertest's harness: a classic queue per case, whose own
// dead-letter exchange routes to a queue of its own (idemamqptest.NewQueue),
// a consumer connected through a proxy that Cut drops, one handler at a
// time.
type rabbitMQ struct{}

// frameMax is RabbitMQ's default frame_max, which the broker of the tests
// keeps: the content header of a message, its headers among them, fits one
// frame of it.
const frameMax = 128 << 10

// MaxHeader is what the key header's value may hold when the content
// header fits frameMax: less the frame's own 8 bytes, the content header's
// 14, the properties the harness sets (content-type, delivery mode, 19),
// the table's length (4), the key header's name and type (21), and a few
// bytes of margin. The dead letter's headers do not fit beside it.
func (rabbitMQ) MaxHeader() int { return frameMax - 128 }

// MaxBody is RabbitMQ's default max_message_size, the broker's real limit:
// 128 MiB. Published, delivered through the proxy, fingerprinted and
// dead-lettered, it took 3 s under -race on a 2-core machine, in parallel
// with the other cases: no need for less.
func (rabbitMQ) MaxBody() int { return idemamqp.DefaultMaxMessageSize }

// Ordered is false: with a prefetch above one, a requeued delivery goes
// behind those the broker already sent.
func (rabbitMQ) Ordered() bool { return false }

func (b rabbitMQ) New(t *testing.T, cfg consumertest.Config) error {
	conn := idemamqptest.Connect(t)
	q := idemamqptest.NewQueue(t, conn, idemamqptest.Classic, nil)
	_, err := b.consumer(t, conn, q, idemamqptest.URL(), cfg)
	return err
}

func (b rabbitMQ) Start(t *testing.T, cfg consumertest.Config) consumertest.Consumer {
	conn := idemamqptest.Connect(t)
	q := idemamqptest.NewQueue(t, conn, idemamqptest.Classic, nil)
	p := proxyTo(t)
	r := &harnessRun{q: q, p: p, conn: conn}
	c, err := b.consumer(t, conn, q, proxiedURL(t, p), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.deadQueue = q.DeadLetters
	if cfg.Poison == consumertest.PoisonDeadLetter {
		r.deadQueue = q.Name + ".dead"
	}
	q.DeleteAtEnd(c.DelayQueue())
	r.run = consumertest.Go(c.Run)
	t.Cleanup(func() { r.Stop(t) })
	return r
}

// consumer returns the consumer of q that cfg describes, at url.
func (rabbitMQ) consumer(t *testing.T, conn *amqp.Connection, q *idemamqptest.Queue, url string, cfg consumertest.Config) (*idemamqp.Consumer, error) {
	opts := []idemamqp.Option{
		idemamqp.WithConcurrency(1), idemamqp.WithPrefetch(4),
		idemamqp.WithRetryBackoff(cfg.RetryFirst, cfg.RetryLongest),
		idemamqp.WithBusyDelay(cfg.BusyDelay),
		idemamqp.WithDrainTimeout(cfg.DrainTimeout),
		idemamqp.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond),
	}
	switch cfg.Scope {
	case consumertest.ScopeShared:
		opts = append(opts, idemamqp.WithSharedScope())
	case consumertest.ScopeHeader:
		opts = append(opts, idemamqp.WithScope(func(d amqp.Delivery) string {
			userFunc(cfg, "scope", d)
			s, _ := d.Headers["tenant"].(string)
			return s
		}))
	}
	if cfg.UserFunc != nil {
		opts = append(opts,
			idemamqp.WithKeyFunc(func(d amqp.Delivery) (string, error) {
				userFunc(cfg, "key", d)
				return received(d).Key, nil
			}),
			idemamqp.WithFingerprint(func(d amqp.Delivery) []byte {
				userFunc(cfg, "fingerprint", d)
				return d.Body
			}),
			idemamqp.WithObserver(func(context.Context, idemamqp.Event) { cfg.UserFunc("observer", consumertest.Received{}) }))
	}
	switch cfg.Poison {
	case consumertest.PoisonDeadLetter:
		// An exchange of the case's own, bound to a queue of its own;
		// deleted with that queue (auto-delete).
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		exchange, dead := q.Name+".dlx", q.Name+".dead"
		q.DeleteAtEnd(dead)
		if err := ch.ExchangeDeclare(exchange, "fanout", false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(dead, true, false, false, false, amqp.Table{"x-expires": int64(time.Hour / time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(dead, "", exchange, false, nil); err != nil {
			t.Fatal(err)
		}
		opts = append(opts, idemamqp.WithDeadLetter(exchange, ""))
	case consumertest.PoisonRefused:
		opts = append(opts, idemamqp.WithDeadLetter(q.Name+".no-such-exchange", ""))
	case consumertest.PoisonDiscard:
		opts = append(opts, idemamqp.WithDiscardPoison())
	}
	if cfg.MaxAttempts != 0 {
		opts = append(opts, idemamqp.WithMaxAttempts(cfg.MaxAttempts))
	}
	if cfg.UnkeyedUnguarded {
		opts = append(opts, idemamqp.WithUnkeyedUnguarded())
	}
	h := func(ctx context.Context, d amqp.Delivery) error { return cfg.Handler(ctx, received(d)) }
	return idemamqp.New(cfg.Guard, url, q.Name, h, opts...)
}

// received is d as the suite's handler gets it.
func received(d amqp.Delivery) consumertest.Received {
	key, _ := d.Headers[idemamqp.DefaultKeyHeader].(string)
	return consumertest.Received{Key: key, Body: d.Body, Headers: textHeaders(d.Headers)}
}

// userFunc calls cfg's UserFunc, if any, as the function fn of d.
func userFunc(cfg consumertest.Config, fn string, d amqp.Delivery) {
	if cfg.UserFunc != nil {
		cfg.UserFunc(fn, received(d))
	}
}

// textHeaders returns a table's values as text.
func textHeaders(t amqp.Table) map[string]string {
	out := make(map[string]string, len(t))
	for k, v := range t {
		switch v := v.(type) {
		case string:
			out[k] = v
		case []byte:
			out[k] = string(v)
		default:
			out[k] = fmt.Sprint(v)
		}
	}
	return out
}

// harnessRun is a consumer of the harness, running.
type harnessRun struct {
	q         *idemamqptest.Queue
	p         *testenv.Proxy
	conn      *amqp.Connection
	deadQueue string
	run       *consumertest.Running

	mu       sync.Mutex
	received []consumertest.DeadLetter
}

func (r *harnessRun) Publish(t *testing.T, m consumertest.Message) {
	t.Helper()
	h := amqp.Table{}
	for k, v := range m.Headers {
		h[k] = v
	}
	r.q.Publish(idemamqptest.Msg{Key: m.Key, NoKey: m.NoKey, Body: string(m.Body), Headers: h})
}

// DeadLetters takes what arrived at the dead-letter queue since the last
// call, and returns every dead letter so far.
func (r *harnessRun) DeadLetters(t *testing.T) []consumertest.DeadLetter {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	ch, err := r.conn.Channel()
	if err != nil {
		t.Fatalf("open a channel: %v", err)
	}
	defer ch.Close()
	for {
		d, ok, err := ch.Get(r.deadQueue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", r.deadQueue, err)
		}
		if !ok {
			break
		}
		r.received = append(r.received, consumertest.DeadLetter{Body: d.Body, Headers: textHeaders(d.Headers)})
	}
	return append([]consumertest.DeadLetter(nil), r.received...)
}

func (r *harnessRun) Stop(t *testing.T) error { return r.run.Stop(t) }

func (r *harnessRun) Cut(t *testing.T) { r.p.Drop() }

// proxyTo returns a proxy to the broker of the tests, closed when t ends.
func proxyTo(t *testing.T) *testenv.Proxy {
	t.Helper()
	idemamqptest.Connect(t) // skips, or fails, when the broker is unreachable
	u, err := url.Parse(idemamqptest.URL())
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	if port == "" {
		port = strconv.Itoa(5672)
		if u.Scheme == "amqps" {
			port = "5671"
		}
	}
	return testenv.StartProxy(t, net.JoinHostPort(u.Hostname(), port))
}

// proxiedURL is the URL of the broker of the tests through p.
func proxiedURL(t *testing.T, p *testenv.Proxy) string {
	t.Helper()
	u, err := url.Parse(idemamqptest.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	return u.String()
}
