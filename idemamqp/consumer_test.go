package idemamqp_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/idemamqp/idemamqptest"
	"github.com/idemgo/idem/memstore"
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
	stop := idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, h, idemamqp.WithShutdownTimeout(30*time.Second)))
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x"})
	<-started
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("Run returned while a handler was running, before the shutdown timeout")
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

func TestShutdownTimeoutCancelsAndRequeues(t *testing.T) {
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
	stop := idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, h, idemamqp.WithShutdownTimeout(timeout)))
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x"})
	<-started
	begin := time.Now()
	stop()
	if took := time.Since(begin); took < timeout {
		t.Errorf("Run returned %v after its context ended, before the shutdown timeout %v", took, timeout)
	}
	if c, _ := cause.Load().(error); c == nil || !strings.Contains(c.Error(), "shutdown timeout") {
		t.Errorf("the handler's context ended with %v, want the shutdown timeout as the cause", c)
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
	idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, h, idemamqp.WithUnkeyed(idemamqp.RunUnkeyed)))
	q.Publish(idemamqptest.Msg{NoKey: true, Body: "a"}, idemamqptest.Msg{NoKey: true, Body: "a"})
	idemamqptest.Eventually(t, 10*time.Second, "both acked", func() bool { return ev.Kind(idemamqp.EventAcked) == 2 })
	if runs.Load() != 2 {
		t.Errorf("%d runs, want 2: without a key, every delivery runs", runs.Load())
	}
}

func TestDeadLetterExchangeCarriesTheCause(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	h := func(context.Context, amqp.Delivery) error { return idem.Permanent(errors.New("card declined")) }
	// The default exchange routes to the dead-letter queue by its name.
	idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, h, idemamqp.WithDeadLetter("", q.DeadLetters)))
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x", Headers: amqp.Table{"tenant": "acme"}})
	d := q.GetAll(q.DeadLetters, 1, 10*time.Second)[0]
	if d.Headers[idemamqp.CauseHeader] != "card declined" || d.Headers[idemamqp.QueueHeader] != q.Name ||
		d.Headers[idemamqp.ReasonHeader] != string(idemamqp.ReasonPermanent) ||
		d.Headers["tenant"] != "acme" || string(d.Body) != "x" {
		t.Errorf("dead letter %q with headers %v; want the message with cause and queue headers", d.Body, d.Headers)
	}
	if _, ok := d.Headers["x-death"]; ok {
		t.Errorf("the dead letter was rejected (x-death %v), want it published", d.Headers["x-death"])
	}
	idemamqptest.Eventually(t, 10*time.Second, "settled", func() bool { return ev.Kind(idemamqp.EventDeadLettered) == 1 })
}

func TestDeadLetterExchangeUnroutableFallsBackToReject(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	h := func(context.Context, amqp.Delivery) error { return idem.Permanent(errors.New("card declined")) }
	idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, h, idemamqp.WithDeadLetter("", q.Name+".no-such-queue")))
	q.Publish(idemamqptest.Msg{Key: "k", Body: "x"})
	d := q.GetAll(q.DeadLetters, 1, 10*time.Second)[0]
	if _, ok := d.Headers["x-death"]; !ok {
		t.Errorf("dead letter without x-death: %v; want it rejected to the queue's own dead-letter exchange", d.Headers)
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
		if e.Op == idem.OpClaim && e.Outcome == idem.Busy {
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
		idemamqp.WithBusyDelay(50*time.Millisecond))
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

// flaky is a store whose Claim fails while down is set.
type flaky struct {
	idem.Store
	down   atomic.Bool
	claims atomic.Int64
}

func (f *flaky) Claim(ctx context.Context, a idem.ClaimArgs) (idem.Claim, error) {
	f.claims.Add(1)
	if f.down.Load() {
		return idem.Claim{}, errors.New("connection refused")
	}
	return f.Store.Claim(ctx, a)
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
	c, err := idemamqp.New(g, "amqp://guest:guest@"+addr+"/", "q", nop, idemamqp.WithSharedScope(),
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
	if err != nil || rec.Status != idem.StatusInProgress || rec.Token != 0 {
		t.Errorf("record %+v, %v; want the key released", rec, err)
	}
}
