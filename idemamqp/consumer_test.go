package idemamqp_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/idemamqp/idemamqptest"
	"github.com/idemgo/idem/internal/adaptertest"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

// setup returns a classic test queue, a Guard over a fresh memstore and an
// event recorder.
func setup(t *testing.T, typ idemamqptest.QueueType, args amqp.Table, cfg idem.Config) (*idemamqptest.Queue, *idem.Guard, *idemamqptest.Events) {
	t.Helper()
	conn := idemamqptest.Connect(t)
	q := idemamqptest.NewQueue(t, conn, typ, args)
	return q, newMemGuard(t, cfg), &idemamqptest.Events{}
}

func keyOf(d amqp.Delivery) string { k, _ := d.Headers["idempotency-key"].(string); return k }

func TestShutdownLetsRunningHandlersFinish(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	started, finish := make(chan struct{}), make(chan struct{})
	l := idemamqptest.NewLedger()
	h := func(ctx context.Context, d amqp.Delivery) error {
		close(started)
		<-finish
		if err := ctx.Err(); err != nil {
			return err
		}
		l.Charge(keyOf(d))
		return nil
	}
	stop := idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, h, idemamqp.WithDrainTimeout(30*time.Second)))
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x"})
	<-started
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("Run returned while a handler was running, before the drain timeout")
	case <-time.After(200 * time.Millisecond):
	}
	close(finish)
	<-stopped
	l.Check(t, []string{"k"})
	if n := ev.Kind(idemamqp.EventAcked); n != 1 {
		t.Errorf("%d acks, want the finished handler's delivery acked", n)
	}
	if n := q.Ready(q.Name); n != 0 {
		t.Errorf("%d messages back in the queue, want 0", n)
	}
}

func TestDrainTimeoutCancelsAndRequeues(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	started := make(chan struct{})
	var cause atomic.Value
	h := func(ctx context.Context, d amqp.Delivery) error {
		close(started)
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return ctx.Err()
	}
	const timeout = 300 * time.Millisecond
	stop := idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, h, idemamqp.WithDrainTimeout(timeout)))
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x"})
	<-started
	begin := time.Now()
	stop()
	if took := time.Since(begin); took < timeout {
		t.Errorf("Run returned %v after its context ended, before the drain timeout %v", took, timeout)
	}
	if c, _ := cause.Load().(error); c == nil || !strings.Contains(c.Error(), "drain timeout") {
		t.Errorf("the handler's context ended with %v, want the drain timeout as the cause", c)
	}
	if n := ev.Kind(idemamqp.EventRequeued); n != 1 {
		t.Errorf("%d requeues, want the cancelled handler's delivery requeued", n)
	}
	idemamqptest.Eventually(t, 10*time.Second, "the message back in the queue", func() bool { return q.Ready(q.Name) == 1 })

	// Its key was released: another consumer runs it at once.
	l := idemamqptest.NewLedger()
	idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, &idemamqptest.Events{}, func(_ context.Context, d amqp.Delivery) error {
		l.Charge(keyOf(d))
		return nil
	}))
	idemamqptest.Eventually(t, 10*time.Second, "the requeued message ran", func() bool { return l.Count("k") == 1 })
}

func TestUnkeyedRunsUnguarded(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	var runs atomic.Int64
	h := func(context.Context, amqp.Delivery) error { runs.Add(1); return nil }
	idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, h, idemamqp.WithUnkeyedUnguarded()))
	q.Publish(idemamqptest.Msg{NoKey: true, Body: "a"}, idemamqptest.Msg{NoKey: true, Body: "a"})
	idemamqptest.Eventually(t, 10*time.Second, "both acked", func() bool { return ev.Kind(idemamqp.EventAcked) == 2 })
	if runs.Load() != 2 {
		t.Errorf("%d runs, want 2: without a key, every delivery runs", runs.Load())
	}
}

// newDeadLettering returns a consumer of q with the test options and
// WithDeadLetter(exchange, routingKey), and opts after those.
func newDeadLettering(t *testing.T, g *idem.Guard, q *idemamqptest.Queue, ev *idemamqptest.Events, h idemamqp.Handler,
	exchange, routingKey string, opts ...idemamqp.Option) *idemamqp.Consumer {
	t.Helper()
	opts = append(append(idemamqptest.Options(ev), idemamqp.WithDeadLetter(exchange, routingKey)), opts...)
	c, err := idemamqp.New(g, idemamqptest.URL(), q.Name, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDeadLetterExchangeCarriesTheCause(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	h := func(context.Context, amqp.Delivery) error { return idem.Permanent(errors.New("card declined")) }
	// The default exchange routes to the dead-letter queue by its name.
	idemamqptest.Start(t, q, newDeadLettering(t, g, q, ev, h, "", q.DeadLetters))
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x", Headers: amqp.Table{"tenant": "acme", "attempt": int32(3)}, Props: func(p *amqp.Publishing) {
		p.MessageId, p.Type = "m-1", "OrderCreated"
	}})
	d := q.GetAll(q.DeadLetters, 1, 10*time.Second)[0]
	want := amqp.Table{
		consumer.HeaderCause: "card declined", consumer.HeaderReason: string(consumer.ReasonPermanent), consumer.HeaderKey: "k",
		idemamqp.HeaderQueue: q.Name, idemamqp.HeaderExchange: "", idemamqp.HeaderRoutingKey: q.Name,
		"tenant": "acme", "attempt": int32(3), "idempotency-key": "k",
	}
	for name, v := range want {
		if d.Headers[name] != v {
			t.Errorf("dead letter's header %s = %#v, want %#v", name, d.Headers[name], v)
		}
	}
	if string(d.Body) != "x" || d.MessageId != "m-1" || d.Type != "OrderCreated" || d.ContentType != "application/json" {
		t.Errorf("dead letter %q (message-id %q, type %q, content-type %q), want the original's body and properties",
			d.Body, d.MessageId, d.Type, d.ContentType)
	}
	if _, ok := d.Headers["x-death"]; ok {
		t.Errorf("the dead letter was rejected (x-death %v), want it published", d.Headers["x-death"])
	}
	idemamqptest.Eventually(t, 10*time.Second, "settled", func() bool { return ev.Kind(idemamqp.EventDeadLettered) == 1 })
}

// A dead letter the broker refuses (an unroutable one comes back, as the
// mandatory flag asks) is tried MaxAttempts times; then the consumer gives
// up on it: it logs it, reports EventDiscarded with the broker's refusal,
// and rejects the delivery to the queue's own dead-letter exchange.
func TestDeadLetterUnroutableGivenUp(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	h := func(context.Context, amqp.Delivery) error { return idem.Permanent(errors.New("card declined")) }
	var logs adaptertest.Logs
	idemamqptest.Start(t, q, newDeadLettering(t, g, q, ev, h, "", q.Name+".no-such-queue", idemamqp.WithMaxAttempts(2),
		idemamqp.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x"})
	d := q.GetAll(q.DeadLetters, 1, 10*time.Second)[0]
	if _, ok := d.Headers["x-death"]; !ok {
		t.Errorf("dead letter without x-death: %v; want it rejected to the queue's own dead-letter exchange", d.Headers)
	}
	idemamqptest.Eventually(t, 10*time.Second, "discarded", func() bool { return ev.Kind(idemamqp.EventDiscarded) == 1 })
	e := ev.Of(idemamqp.EventDiscarded)[0]
	if e.Reason != consumer.ReasonPermanent || !strings.Contains(fmt.Sprint(e.Err), "card declined") ||
		!strings.Contains(fmt.Sprint(e.BrokerErr), "unroutable") {
		t.Errorf("EventDiscarded %+v, want the cause and the broker's refusal", e)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "refused the dead letter 2 times") {
		t.Errorf("no error log of the dead letter given up:\n%s", logs.String())
	}
}

// A dead letter to an exchange that does not exist: the broker closes the
// publishing channel (404). That refusal is the dead letter's alone: the
// connection stays, the deliveries in flight are acked once each, and the
// poison is given up on after MaxAttempts.
func TestDeadLetterMissingExchangeKeepsTheOthers(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	l := idemamqptest.NewLedger()
	release := make(chan struct{})
	h := func(ctx context.Context, d amqp.Delivery) error {
		if keyOf(d) == "poison" {
			return idem.Permanent(errors.New("card declined"))
		}
		<-release // in flight while the dead letter is refused
		l.Charge(keyOf(d))
		return nil
	}
	idemamqptest.Start(t, q, newDeadLettering(t, g, q, ev, h, q.Name+".no-such-exchange", "", idemamqp.WithMaxAttempts(3),
		idemamqp.WithConcurrency(4), idemamqp.WithPrefetch(8)))
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the consumer stops
	q.Publish(idemamqptest.Msg{Key: "a", Body: "a"}, idemamqptest.Msg{Key: "b", Body: "b"}, idemamqptest.Msg{Key: "poison", Body: "p"})
	idemamqptest.Eventually(t, 30*time.Second, "the poison given up", func() bool { return ev.Kind(idemamqp.EventDiscarded) == 1 })
	once.Do(func() { close(release) })
	idemamqptest.Eventually(t, 30*time.Second, "the others acked", func() bool { return ev.Kind(idemamqp.EventAcked) == 2 })
	l.Check(t, []string{"a", "b"})
	var aerr *amqp.Error
	if e := ev.Of(idemamqp.EventDiscarded)[0]; !errors.As(e.BrokerErr, &aerr) || aerr.Code != amqp.NotFound {
		t.Errorf("EventDiscarded's BrokerErr = %v, want the broker's 404", e.BrokerErr)
	}
	if n := ev.Kind(idemamqp.EventDisconnected) + ev.Kind(idemamqp.EventUnsettled); n != 0 {
		t.Errorf("%d disconnections and unsettled deliveries, want none: a refused dead letter closes its channel only", n)
	}
	idemamqptest.Eventually(t, 10*time.Second, "the poison in the queue's own dead letters", func() bool { return q.Ready(q.DeadLetters) == 1 })
}

// A dead letter that cannot reach the broker (the connection is cut as it
// is sent) is an outage, not a refusal: with MaxAttempts 1 the consumer
// does not give up on it; the broker delivers the message again once the
// consumer reconnected, and its dead letter is published then.
func TestDeadLetterOutageIsNoRefusal(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	p := proxyTo(t)
	var runs atomic.Int64
	h := func(context.Context, amqp.Delivery) error {
		if runs.Add(1) == 1 {
			p.Drop() // the connection is gone when the dead letter goes out
		}
		return idem.Permanent(errors.New("card declined"))
	}
	opts := append(idemamqptest.Options(ev), idemamqp.WithDeadLetter("", q.DeadLetters), idemamqp.WithMaxAttempts(1))
	c, err := idemamqp.New(g, proxiedURL(t, p), q.Name, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	idemamqptest.Start(t, q, c)
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x"})
	d := q.GetAll(q.DeadLetters, 1, 30*time.Second)[0]
	if d.Headers[consumer.HeaderReason] != string(consumer.ReasonPermanent) {
		t.Errorf("dead letter headers %v, want a published dead letter", d.Headers)
	}
	if n := ev.Kind(idemamqp.EventDiscarded); n != 0 {
		t.Errorf("%d deliveries given up on: an outage counted as a refusal", n)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1 (its failure is stored)", n)
	}
	if n := ev.Kind(idemamqp.EventConnected); n < 2 {
		t.Errorf("%d connections, want a reconnect after the cut", n)
	}
}

// A quorum queue counts requeues toward x-delivery-limit; trips through the
// delay queue are new messages and count nothing, so a key held for longer
// than the limit's worth of busy delays still runs.
func TestBusyTripsSpendNoQuorumDeliveries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		delayQueue bool
	}{{"delay queue", true}, {"held and requeued", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q, g, ev := setup(t, idemamqptest.Quorum, amqp.Table{"x-delivery-limit": int64(1)}, idem.Config{})
			var busy atomic.Int64
			g = guardWithBusyCount(t, g, &busy)
			token := idemamqptest.HoldKey(t, g, "", "k", "x")
			l := idemamqptest.NewLedger()
			opts := []idemamqp.Option{}
			if !tc.delayQueue {
				opts = append(opts, idemamqp.WithDelayQueue(""))
			}
			idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, func(_ context.Context, d amqp.Delivery) error {
				l.Charge(keyOf(d))
				return nil
			}, opts...))
			q.Publish(idemamqptest.Msg{Key: "k", Body: "x"})
			if !tc.delayQueue {
				// The broker dead-letters it past the limit, unrun.
				q.GetAll(q.DeadLetters, 1, 10*time.Second)
				if busy.Load() > 3 || l.Count("k") != 0 {
					t.Errorf("%d busy claims and %d runs before the broker's limit, want at most 2 and 0", busy.Load(), l.Count("k"))
				}
				return
			}
			idemamqptest.Eventually(t, 10*time.Second, "four trips through the delay queue", func() bool { return busy.Load() >= 4 })
			if err := g.Store().Release(context.Background(), g.ScopedStoreKey("", "k"), token); err != nil {
				t.Fatal(err)
			}
			idemamqptest.Eventually(t, 10*time.Second, "the delivery ran", func() bool { return l.Count("k") == 1 })
			if n := q.Ready(q.DeadLetters); n != 0 {
				t.Errorf("%d dead letters, want 0", n)
			}
		})
	}
}

// guardWithBusyCount returns a Guard like g over g's store that counts its
// busy claims.
func guardWithBusyCount(t *testing.T, g *idem.Guard, busy *atomic.Int64) *idem.Guard {
	t.Helper()
	cfg := g.Config()
	cfg.Observer = func(_ context.Context, e idem.Event) {
		if e.Op == idem.OpClaim && e.Outcome == storage.Busy {
			busy.Add(1)
		}
	}
	g2, err := idem.New(g.Store(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g2.Close() })
	return g2
}

// A scope read from the user-id would not survive the delay queue (the
// copy cannot carry another user's id): such a busy delivery is held and
// requeued instead, and still runs once.
func TestBusyWithUserIDScopeIsRequeued(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	var busy atomic.Int64
	g = guardWithBusyCount(t, g, &busy)
	token := idemamqptest.HoldKey(t, g, "guest", "k", "x")
	l := idemamqptest.NewLedger()
	c, err := idemamqp.New(g, idemamqptest.URL(), q.Name, func(_ context.Context, d amqp.Delivery) error {
		l.Charge(d.UserId + "/" + keyOf(d))
		return nil
	}, idemamqp.WithScope(func(d amqp.Delivery) string { return d.UserId }), idemamqp.WithObserver(ev.Observe),
		idemamqp.WithDiscardPoison(), idemamqp.WithBusyDelay(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	idemamqptest.Start(t, q, c)
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x", Props: func(p *amqp.Publishing) { p.UserId = "guest" }})
	idemamqptest.Eventually(t, 10*time.Second, "three busy claims", func() bool { return busy.Load() >= 3 })
	if err := g.Store().Release(context.Background(), g.ScopedStoreKey("guest", "k"), token); err != nil {
		t.Fatal(err)
	}
	idemamqptest.Eventually(t, 10*time.Second, "the delivery ran", func() bool { return ev.Kind(idemamqp.EventAcked) == 1 })
	l.Check(t, []string{"guest/k"})
	if n := ev.Kind(idemamqp.EventDelayed); n != 0 {
		t.Errorf("%d trips through the delay queue, want 0", n)
	}
	if n := ev.Kind(idemamqp.EventRequeued); n < 3 {
		t.Errorf("%d requeues, want one per busy claim", n)
	}
}

// flaky is a store whose claims (Claim, ClaimBatch) fail while down is set.
type flaky struct {
	storage.Store
	down   atomic.Bool
	claims atomic.Int64
}

func (f *flaky) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	f.claims.Add(1)
	if f.down.Load() {
		return storage.Claim{}, errors.New("connection refused")
	}
	return f.Store.Claim(ctx, a)
}

func (f *flaky) ClaimBatch(ctx context.Context, as []storage.ClaimArgs) ([]storage.Claim, error) {
	f.claims.Add(1)
	if f.down.Load() {
		return nil, errors.New("connection refused")
	}
	return f.Store.ClaimBatch(ctx, as)
}

// While the store cannot be reached the delivery is held, not requeued: the
// broker does not deliver it again, and it runs once the store is back.
func TestStoreOutageHoldsTheDelivery(t *testing.T) {
	t.Parallel()
	conn := idemamqptest.Connect(t)
	q := idemamqptest.NewQueue(t, conn, idemamqptest.Quorum, amqp.Table{"x-delivery-limit": int64(1)})
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f := &flaky{Store: s}
	f.down.Store(true)
	g, err := idem.New(f, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	ev := &idemamqptest.Events{}
	var redelivered atomic.Bool
	idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, func(_ context.Context, d amqp.Delivery) error {
		redelivered.Store(d.Redelivered)
		return nil
	}))
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x"})
	idemamqptest.Eventually(t, 10*time.Second, "four failed claims", func() bool { return f.claims.Load() >= 4 })
	f.down.Store(false)
	idemamqptest.Eventually(t, 10*time.Second, "the delivery ran", func() bool { return ev.Kind(idemamqp.EventAcked) == 1 })
	if redelivered.Load() || ev.Kind(idemamqp.EventRequeued) != 0 {
		t.Errorf("redelivered %v, %d requeues; want the first delivery held until the store came back",
			redelivered.Load(), ev.Kind(idemamqp.EventRequeued))
	}
}

// The broker cancels the subscription when the queue is deleted; the
// consumer subscribes again once the queue is back.
func TestSubscriptionCancelledResubscribes(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	l := idemamqptest.NewLedger()
	idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, func(_ context.Context, d amqp.Delivery) error {
		l.Charge(keyOf(d))
		return nil
	}))
	q.Publish(idemamqptest.Msg{Key: "a", Body: "a"})
	idemamqptest.Eventually(t, 10*time.Second, "a ran", func() bool { return l.Count("a") == 1 })

	ch, err := idemamqptest.Connect(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	idemamqptest.Eventually(t, 10*time.Second, "disconnected", func() bool { return ev.Kind(idemamqp.EventDisconnected) >= 1 })
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q.DeadLetters}); err != nil {
		t.Fatal(err)
	}
	q.Publish(idemamqptest.Msg{Key: "b", Body: "b"})
	idemamqptest.Eventually(t, 10*time.Second, "b ran", func() bool { return l.Count("b") == 1 })
	l.Check(t, []string{"a", "b"})
}

func TestRunTwice(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	c := idemamqptest.NewConsumer(t, g, q, ev, nop)
	idemamqptest.Start(t, q, c)
	idemamqptest.Eventually(t, 10*time.Second, "connected", func() bool { return ev.Kind(idemamqp.EventConnected) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Run(ctx); !errors.Is(err, idemamqp.ErrRunning) {
		t.Errorf("a second Run: %v, want ErrRunning", err)
	}
}

// Without a broker Run keeps trying, and still stops when told.
func TestNoBrokerRetriesUntilStopped(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	g := newMemGuard(t, idem.Config{})
	var dials atomic.Int64
	c, err := idemamqp.New(g, "amqp://guest:guest@"+addr+"/", "q", nop, idemamqp.WithSharedScope(), idemamqp.WithDiscardPoison(),
		idemamqp.WithReconnectBackoff(10*time.Millisecond, 20*time.Millisecond),
		idemamqp.WithConfig(amqp.Config{Dial: func(network, a string) (net.Conn, error) {
			dials.Add(1)
			return net.DialTimeout(network, a, time.Second)
		}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	idemamqptest.Eventually(t, 10*time.Second, "three attempts to connect", func() bool { return dials.Load() >= 3 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v, want nil after its context ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// A handler that ends its goroutine (runtime.Goexit, as t.FailNow does)
// leaves its delivery unsettled, and Run still stops: the key is released
// and the broker delivers the message again.
func TestHandlerGoexitDoesNotHangRun(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	var runs atomic.Int64
	stop := idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, func(context.Context, amqp.Delivery) error {
		if runs.Add(1) == 1 {
			runtime.Goexit()
		}
		return nil
	}, idemamqp.WithConcurrency(1), idemamqp.WithPrefetch(1)))
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x"})
	idemamqptest.Eventually(t, 10*time.Second, "the handler ran", func() bool { return runs.Load() == 1 })
	stop()
	idemamqptest.Eventually(t, 10*time.Second, "the message back in the queue", func() bool { return q.Ready(q.Name) == 1 })
	rec, err := g.Store().Get(context.Background(), g.ScopedStoreKey("", "k"))
	if err != nil || rec.Status != storage.StatusInProgress || rec.Token != 0 {
		t.Errorf("record %+v, %v; want the key released", rec, err)
	}
}

// The headers of a dead letter fit the frame size the connection
// negotiated (here a consumer's 16 KiB, below the broker's 128 KiB): a
// message whose headers fit a frame, poison with a cause of 1 KiB, is
// dead-lettered without its long header, recorded by name, and keeps its
// body; the broker never closes the connection over a frame too large.
func TestDeadLetterFitsTheNegotiatedFrame(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	const frame = 16 << 10
	long := strings.Repeat("v", frame-700) // fits the frame, not beside the dead letter's headers
	h := func(context.Context, amqp.Delivery) error {
		return idem.Permanent(errors.New("declined: " + strings.Repeat("why ", 300)))
	}
	idemamqptest.Start(t, q, newDeadLettering(t, g, q, ev, h, "", q.DeadLetters, idemamqp.WithConfig(amqp.Config{FrameSize: frame})))
	q.Publish(idemamqptest.Msg{Key: "k", Body: "the body", Headers: amqp.Table{"long": long, "short": "s"}})
	d := q.GetAll(q.DeadLetters, 1, 30*time.Second)[0]
	if d.Headers[consumer.HeaderCutHeaders] != "long" || d.Headers["short"] != "s" || string(d.Body) != "the body" ||
		d.Headers[consumer.HeaderReason] != string(consumer.ReasonPermanent) {
		t.Errorf("dead letter %q with %s %q, short %q; want the long header cut, the rest kept",
			d.Body, consumer.HeaderCutHeaders, d.Headers[consumer.HeaderCutHeaders], d.Headers["short"])
	}
	if _, ok := d.Headers["long"]; ok {
		t.Error("the long header is in the dead letter")
	}
	if n := ev.Kind(idemamqp.EventDisconnected); n != 0 {
		t.Errorf("%d disconnections, want none", n)
	}
}

// slowConn holds what it reads while paused: the broker's answers (a
// publish's confirm among them) arrive late, the connection stays up.
type slowConn struct {
	net.Conn
	paused *atomic.Bool
}

func (c slowConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	for c.paused.Load() {
		time.Sleep(5 * time.Millisecond)
	}
	return n, err
}

// A dead letter whose confirm does not come in time is an outage, not a
// refusal, even on a live connection: with MaxAttempts 1 the consumer
// does not give up on it, but holds the delivery and sends the dead
// letter again until the broker answers. (A dead letter is published at
// least once: those of the tries that timed out may arrive too.)
func TestDeadLetterTimeoutIsNoRefusal(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	var paused atomic.Bool
	cfg := amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := amqp.DefaultDial(10*time.Second)(network, addr)
		if err != nil {
			return nil, err
		}
		return slowConn{Conn: c, paused: &paused}, nil
	}}
	h := func(context.Context, amqp.Delivery) error {
		paused.Store(true) // the broker's answers to the dead letter come late
		return idem.Permanent(errors.New("card declined"))
	}
	var logs adaptertest.Logs
	idemamqptest.Start(t, q, newDeadLettering(t, g, q, ev, h, "", q.DeadLetters, idemamqp.WithMaxAttempts(1),
		idemamqp.WithConfig(cfg), idemamqp.WithPublishTimeout(100*time.Millisecond),
		idemamqp.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
	t.Cleanup(func() { paused.Store(false) })
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x"})
	idemamqptest.Eventually(t, 30*time.Second, "two tries of the dead letter timed out, or the delivery given up on", func() bool {
		return strings.Count(logs.String(), "did not reach the broker") >= 2 || ev.Kind(idemamqp.EventDiscarded) > 0
	})
	paused.Store(false)
	idemamqptest.Eventually(t, 30*time.Second, "settled", func() bool {
		return ev.Kind(idemamqp.EventDeadLettered)+ev.Kind(idemamqp.EventDiscarded) == 1
	})
	if n := ev.Kind(idemamqp.EventDiscarded) + ev.Kind(idemamqp.EventDisconnected); n != 0 {
		t.Errorf("%d deliveries given up on and disconnections: a timeout counted as a refusal", n)
	}
	d := q.GetAll(q.DeadLetters, 1, 10*time.Second)[0]
	if d.Headers[consumer.HeaderReason] != string(consumer.ReasonPermanent) {
		t.Errorf("dead letter headers %v, want a published dead letter", d.Headers)
	}
}
