// Package idemamqptest holds the behaviour suite of package idemamqp's
// consumer, run over any [storage.Store] against a real RabbitMQ, and the
// helpers it is built from (test queues, publishing, a ledger of effects),
// so every store module can check that the consumer works over it:
//
//	func TestAMQP(t *testing.T) {
//		idemamqptest.Run(t, func(t *testing.T) storage.Store { return newStore(t) })
//	}
//
// The broker is the one at IDEM_AMQP_URL (default
// amqp://guest:guest@127.0.0.1:5672/). When it is unreachable the tests
// skip, or fail under IDEM_REQUIRE_SERVICES=1. Each case is a parallel
// subtest with queues of its own, deleted when it ends, and a Guard in a
// random namespace, so newStore may return one shared store.
package idemamqptest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/storage"
)

// Run runs the suite against the stores newStore returns.
func Run(t *testing.T, newStore func(t *testing.T) storage.Store) {
	for _, c := range cases {
		for _, typ := range []QueueType{Classic, Quorum} {
			t.Run(c.name+"/"+string(typ), func(t *testing.T) {
				t.Parallel()
				c.run(t, env{store: newStore(t), conn: Connect(t), typ: typ})
			})
		}
	}
}

// env is what a case runs with.
type env struct {
	store storage.Store
	conn  *amqp.Connection
	typ   QueueType
}

var cases = []struct {
	name string
	run  func(t *testing.T, e env)
}{
	{"DuplicatesOneEffect", duplicatesOneEffect},
	{"StalledHolderOneEffect", stalledHolderOneEffect},
	{"CutOffHolderOneEffect", cutOffHolderOneEffect},
	{"BusyComesBackAfterDelay", busyComesBack},
	{"PoisonDeadLettered", poisonDeadLettered},
	{"TooManyAttemptsDeadLettered", tooManyAttempts},
	{"ConnectionDropped", connectionDropped},
	{"ScopesNeverCross", scopesNeverCross},
}

// Options returns the options of a test consumer but its poison
// decision: short delays for tests (busy delay 100ms, retry backoff from
// 20ms to 100ms, reconnects within 50ms to 1s, drain timeout 5s), a shared
// scope, and its events recorded in ev when ev is not nil.
func Options(ev *Events) []idemamqp.Option {
	opts := []idemamqp.Option{
		idemamqp.WithSharedScope(),
		idemamqp.WithBusyDelay(100 * time.Millisecond),
		idemamqp.WithRetryBackoff(20*time.Millisecond, 100*time.Millisecond),
		idemamqp.WithReconnectBackoff(50*time.Millisecond, time.Second),
		idemamqp.WithDrainTimeout(5 * time.Second),
	}
	if ev != nil {
		opts = append(opts, idemamqp.WithObserver(ev.Observe))
	}
	return opts
}

// NewConsumer returns a consumer of q over g with the [Options] of tests
// and WithDiscardPoison, so that poison goes to the queue's own
// dead-letter exchange (see [NewQueue]), and opts applied after those.
func NewConsumer(t testing.TB, g *idem.Guard, q *Queue, ev *Events, h idemamqp.Handler, opts ...idemamqp.Option) *idemamqp.Consumer {
	t.Helper()
	base := append(Options(ev), idemamqp.WithDiscardPoison())
	c, err := idemamqp.New(g, URL(), q.Name, h, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// keys returns n keys with prefix.
func keys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return ks
}

// charge is a handler that records an effect per key after pause.
func charge(l *Ledger, pause time.Duration) idemamqp.Handler {
	return func(ctx context.Context, d amqp.Delivery) error {
		if pause > 0 {
			time.Sleep(pause)
		}
		l.Charge(d.Headers["idempotency-key"].(string))
		return nil
	}
}

// duplicatesOneEffect: every message published three times, interleaved,
// to a consumer running 8 handlers at once: one effect per key, the other
// copies acked as replays.
func duplicatesOneEffect(t *testing.T, e env) {
	q := NewQueue(t, e.conn, e.typ, nil)
	ks := keys("order", 100)
	var msgs []Msg
	for range 3 {
		for _, k := range ks {
			msgs = append(msgs, Msg{Key: k, Body: `{"order":"` + k + `"}`})
		}
	}
	q.Publish(msgs...)

	l, ev := NewLedger(), &Events{}
	g := NewGuard(t, e.store, idem.Config{})
	Start(t, q, NewConsumer(t, g, q, ev, charge(l, time.Millisecond), idemamqp.WithConcurrency(8), idemamqp.WithPrefetch(16)))
	Eventually(t, 60*time.Second, "every copy acked", func() bool { return ev.Kind(idemamqp.EventAcked) >= len(msgs) })

	l.Check(t, ks)
	fresh := ev.Count(func(e idemamqp.Event) bool { return e.Kind == idemamqp.EventAcked && !e.Replayed })
	replayed := ev.Count(func(e idemamqp.Event) bool { return e.Kind == idemamqp.EventAcked && e.Replayed })
	if fresh != len(ks) || replayed != 2*len(ks) {
		t.Errorf("acked %d fresh and %d replayed, want %d and %d", fresh, replayed, len(ks), 2*len(ks))
	}
	if n := ev.Kind(idemamqp.EventDeadLettered) + ev.Kind(idemamqp.EventDiscarded) + ev.Kind(idemamqp.EventUnsettled); n != 0 {
		t.Errorf("%d deliveries poison or unsettled, want 0", n)
	}
}

// stalledHolderOneEffect: two consumers on one queue; the first holds a
// key with a handler that runs past its lease (the heartbeat extends it),
// the second gets a copy of the message meanwhile. The copy goes round
// the delay queue until the first finishes, then is acked as a replay.
func stalledHolderOneEffect(t *testing.T, e env) {
	q := NewQueue(t, e.conn, e.typ, nil)
	l := NewLedger()
	const lease = 300 * time.Millisecond
	var startedAt atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	slow := func(ctx context.Context, d amqp.Delivery) error {
		if startedAt.CompareAndSwap(0, time.Now().UnixNano()) {
			close(started)
		}
		select {
		case <-release:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		l.Charge(d.Headers["idempotency-key"].(string))
		return nil
	}
	ev := &Events{}
	var busy atomic.Int64
	gA := NewGuard(t, e.store, idem.Config{Lease: lease})
	gB := NewGuard(t, e.store, idem.Config{Namespace: gA.Config().Namespace, Lease: lease,
		Observer: func(_ context.Context, ge idem.Event) {
			if ge.Op == idem.OpClaim && ge.Outcome == storage.Busy {
				busy.Add(1)
			}
		}})

	Start(t, q, NewConsumer(t, gA, q, ev, slow, idemamqp.WithPrefetch(1)))
	q.Publish(Msg{Key: "k", Body: "one"})
	<-started
	Start(t, q, NewConsumer(t, gB, q, ev, slow, idemamqp.WithPrefetch(1)))
	q.Publish(Msg{Key: "k", Body: "one"})

	Eventually(t, 30*time.Second, "the first handler ran past twice its lease, the copy finding the key busy", func() bool {
		return busy.Load() >= 3 && time.Since(time.Unix(0, startedAt.Load())) > 2*lease
	})
	close(release)
	Eventually(t, 30*time.Second, "both copies acked", func() bool { return ev.Kind(idemamqp.EventAcked) >= 2 })
	l.Check(t, []string{"k"})
	if n := ev.Count(func(e idemamqp.Event) bool { return e.Kind == idemamqp.EventAcked && e.Replayed }); n != 1 {
		t.Errorf("%d replays acked, want 1", n)
	}
	if n := ev.Kind(idemamqp.EventDelayed); n < 3 {
		t.Errorf("%d trips through the delay queue, want at least 3", n)
	}
}

// cutOff is a store whose Extend fails: its holder is cut off from the
// store while its handler runs.
type cutOff struct{ storage.Store }

var errCutOff = errors.New("idemamqptest: this holder is cut off from the store")

func (cutOff) Extend(context.Context, string, storage.Token, time.Duration) error { return errCutOff }

// cutOffHolderOneEffect: the first consumer's handler stalls and its
// heartbeat cannot reach the store. Its context is cancelled before its
// lease ends, so it stops without an effect; the second consumer takes the
// key over once the lease ended and charges once.
func cutOffHolderOneEffect(t *testing.T, e env) {
	q := NewQueue(t, e.conn, e.typ, nil)
	l := NewLedger()
	const lease = 400 * time.Millisecond
	started := make(chan struct{})
	var once sync.Once
	var causeA atomic.Value
	stall := func(ctx context.Context, d amqp.Delivery) error {
		once.Do(func() { close(started) })
		<-ctx.Done() // stalled until the lease is given up
		causeA.Store(context.Cause(ctx))
		return context.Cause(ctx)
	}
	evA, evB := &Events{}, &Events{}
	gA := NewGuard(t, cutOff{e.store}, idem.Config{Lease: lease})
	gB := NewGuard(t, e.store, idem.Config{Namespace: gA.Config().Namespace, Lease: lease})

	stopA := Start(t, q, NewConsumer(t, gA, q, evA, stall, idemamqp.WithPrefetch(1), idemamqp.WithRetryBackoff(time.Minute, time.Minute)))
	q.Publish(Msg{Key: "k", Body: "one"})
	<-started
	Start(t, q, NewConsumer(t, gB, q, evB, charge(l, 0), idemamqp.WithPrefetch(1)))
	q.Publish(Msg{Key: "k", Body: "one"})

	Eventually(t, 30*time.Second, "the second consumer charged", func() bool { return l.Count("k") > 0 })
	Eventually(t, 30*time.Second, "the cut-off handler returned", func() bool { return causeA.Load() != nil })
	if c, _ := causeA.Load().(error); !errors.Is(c, idem.ErrLeaseLost) {
		t.Errorf("the cut-off holder's context ended with %v, want ErrLeaseLost", c)
	}
	// The first consumer holds its delivery for a minute before requeueing
	// it: stop it now, so the delivery comes back to the second.
	stopA()
	Eventually(t, 30*time.Second, "both copies acked", func() bool { return evB.Kind(idemamqp.EventAcked) >= 2 })
	l.Check(t, []string{"k"})
}

// busyComesBack: a key held in the store by someone else. Its delivery
// goes to the delay queue and comes back each time after the busy delay,
// unchanged, until the key is released; then it runs once.
func busyComesBack(t *testing.T, e env) {
	q := NewQueue(t, e.conn, e.typ, nil)
	const delay = 200 * time.Millisecond
	var (
		mu    sync.Mutex
		busy  []time.Time
		heads []amqp.Delivery
	)
	g := NewGuard(t, e.store, idem.Config{Observer: func(_ context.Context, ge idem.Event) {
		if ge.Op == idem.OpClaim && ge.Outcome == storage.Busy {
			mu.Lock()
			busy = append(busy, time.Now())
			mu.Unlock()
		}
	}})
	body := `{"order":"k"}`
	token := HoldKey(t, g, "", "k", body)

	l, ev := NewLedger(), &Events{}
	h := func(ctx context.Context, d amqp.Delivery) error {
		mu.Lock()
		heads = append(heads, d)
		mu.Unlock()
		l.Charge(d.Headers["idempotency-key"].(string))
		return nil
	}
	c := NewConsumer(t, g, q, ev, h, idemamqp.WithBusyDelay(delay))
	Start(t, q, c)
	q.Publish(Msg{Key: "k", Body: body, Headers: amqp.Table{"tenant": "acme"}, Props: func(p *amqp.Publishing) {
		p.MessageId, p.CorrelationId, p.Type = "m-1", "c-1", "OrderCreated"
	}})
	Eventually(t, 30*time.Second, "three busy claims", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(busy) >= 3
	})
	if err := e.store.Release(context.Background(), g.ScopedStoreKey("", "k"), token); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, "the delivery ran", func() bool { return ev.Kind(idemamqp.EventAcked) >= 1 })

	l.Check(t, []string{"k"})
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(busy); i++ {
		// A message leaves the delay queue once its TTL passed, never
		// before; an upper bound only checks it did not get stuck.
		if gap := busy[i].Sub(busy[i-1]); gap < delay || gap > 10*delay+5*time.Second {
			t.Errorf("busy claim %d came %v after the one before, want at least the busy delay %v", i, gap, delay)
		}
	}
	for _, d := range ev.Of(idemamqp.EventDelayed) {
		if d.Delay != delay || d.Key != "k" {
			t.Errorf("delayed event %+v, want key k, delay %v", d, delay)
		}
	}
	d := heads[0]
	if string(d.Body) != body || d.Headers["tenant"] != "acme" || d.MessageId != "m-1" || d.CorrelationId != "c-1" ||
		d.Type != "OrderCreated" || d.ContentType != "application/json" || d.DeliveryMode != amqp.Persistent {
		t.Errorf("the delivery that came back from the delay queue lost some of its message: %+v", d)
	}
	if deaths, _ := d.Headers["x-death"].([]any); len(deaths) == 0 {
		t.Errorf("the delivery that came back has no x-death header: %v", d.Headers)
	}
	if n := q.Ready(c.DelayQueue()); n != 0 {
		t.Errorf("%d messages left in the delay queue", n)
	}
}

// HoldKey claims key in scope for a minute in g's store, as another
// consumer of g's namespace would with a delivery of body, and returns the
// token; release it with g.Store().Release(ctx, g.ScopedStoreKey(scope,
// key), token).
func HoldKey(t testing.TB, g *idem.Guard, scope, key, body string) storage.Token {
	t.Helper()
	cfg := g.Config()
	cl, err := g.Store().Claim(context.Background(), storage.ClaimArgs{
		Key:         g.ScopedStoreKey(scope, key),
		Fingerprint: cfg.Fingerprint(nil, []byte(body)),
		Lease:       time.Minute,
		Retention:   cfg.Retention,
	})
	if err != nil || cl.Outcome != storage.Acquired {
		t.Fatalf("claim %s: %v %v", key, cl.Outcome, err)
	}
	return cl.Token
}

// poisonDeadLettered: deliveries that can never succeed go to the queue's
// own dead-letter exchange once (WithDiscardPoison rejects them), without
// looping, and the handler does not run for those that have no usable key.
func poisonDeadLettered(t *testing.T, e env) {
	q := NewQueue(t, e.conn, e.typ, nil)
	var runs sync.Map // key → *atomic.Int64
	ran := func(k string) int64 {
		v, _ := runs.LoadOrStore(k, new(atomic.Int64))
		return v.(*atomic.Int64).Load()
	}
	h := func(ctx context.Context, d amqp.Delivery) error {
		k, _ := d.Headers["idempotency-key"].(string)
		v, _ := runs.LoadOrStore(k, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		if k == "declined" {
			return idem.Permanent(errors.New("card declined"))
		}
		return nil
	}
	ev := &Events{}
	g := NewGuard(t, e.store, idem.Config{})
	Start(t, q, NewConsumer(t, g, q, ev, h))
	q.Publish(
		Msg{Key: "declined", Body: "a"},
		Msg{NoKey: true, Body: "no key"},
		Msg{Key: "", Body: "empty key"},
		Msg{NoKey: true, Headers: amqp.Table{"idempotency-key": int32(7)}, Body: "a number"},
		Msg{Key: strings.Repeat("x", 300), Body: "too long"},
		Msg{Key: "reused", Body: "first"},
	)
	Eventually(t, 30*time.Second, "the first reused key ran", func() bool { return ran("reused") == 1 })
	q.Publish(Msg{Key: "reused", Body: "second, different"}, Msg{Key: "declined", Body: "a"})

	const want = 7 // declined twice, no key, empty, a number, too long, reused
	dead := q.GetAll(q.DeadLetters, want, 30*time.Second)
	Eventually(t, 30*time.Second, "every delivery settled", func() bool { return ev.Settled() >= 8 })
	if n := ran("declined"); n != 1 {
		t.Errorf("the declined key ran %d times, want 1 (the duplicate replays the failure)", n)
	}
	if n := ran("reused"); n != 1 {
		t.Errorf("the reused key ran %d times, want 1", n)
	}
	if n := ran(""); n != 0 {
		t.Errorf("the handler ran %d times for deliveries without a usable key", n)
	}
	for _, d := range dead {
		// Rejected once from the queue; a duplicate that found its key
		// busy also went round the delay queue (reason "expired").
		deaths, _ := d.Headers["x-death"].([]any)
		rejected := 0
		for _, x := range deaths {
			death, _ := x.(amqp.Table)
			if death["reason"] == "rejected" {
				rejected++
				if death["queue"] != q.Name || death["count"] != int64(1) {
					t.Errorf("dead letter %q: death %v, want rejected once from %s", d.Body, death, q.Name)
				}
			}
		}
		if rejected != 1 {
			t.Errorf("dead letter %q: x-death %v, want one rejection", d.Body, deaths)
		}
	}
	reasons := map[consumer.Reason]int{}
	for _, e := range ev.Of(idemamqp.EventDiscarded) {
		reasons[e.Reason]++
	}
	wantReasons := map[consumer.Reason]int{consumer.ReasonPermanent: 2, consumer.ReasonMissingKey: 1,
		consumer.ReasonInvalidKey: 3, consumer.ReasonKeyReused: 1}
	if fmt.Sprint(reasons) != fmt.Sprint(wantReasons) {
		t.Errorf("dead-lettered for %v, want %v", reasons, wantReasons)
	}
	if n := q.Ready(q.Name); n != 0 {
		t.Errorf("%d messages left in the queue, want 0", n)
	}
}

// tooManyAttempts: a handler that fails with a retryable error, or
// panics, every time runs the Guard's MaxAttempts times; then the delivery
// goes to the queue's own dead-letter exchange instead of looping.
func tooManyAttempts(t *testing.T, e env) {
	q := NewQueue(t, e.conn, e.typ, nil)
	var runs atomic.Int64
	h := func(ctx context.Context, d amqp.Delivery) error {
		runs.Add(1)
		if d.Headers["idempotency-key"] == "panics" {
			panic("handler bug")
		}
		return errors.New("the payment provider is down")
	}
	ev := &Events{}
	g := NewGuard(t, e.store, idem.Config{MaxAttempts: 3})
	Start(t, q, NewConsumer(t, g, q, ev, h))
	q.Publish(Msg{Key: "fails", Body: "x"}, Msg{Key: "panics", Body: "y"})

	dead := q.GetAll(q.DeadLetters, 2, 30*time.Second)
	if n := runs.Load(); n != 6 {
		t.Errorf("the handlers ran %d times, want 3 each", n)
	}
	for _, d := range ev.Of(idemamqp.EventDiscarded) {
		if !errors.Is(d.Err, idem.ErrTooManyAttempts) || d.Reason != consumer.ReasonTooManyAttempts {
			t.Errorf("key %s dead-lettered for %v, want ErrTooManyAttempts", d.Key, d.Err)
		}
	}
	if n := ev.Count(func(e idemamqp.Event) bool {
		_, panicked := errors.AsType[*consumer.PanicError](e.Err)
		return e.Kind == idemamqp.EventRequeued && panicked
	}); n != 3 {
		t.Errorf("%d requeues after a panic, want 3", n)
	}
	if len(dead) != 2 {
		t.Errorf("%d dead letters, want 2", len(dead))
	}
}

// connectionDropped: the consumer's connection is cut twice while
// handlers run, once by closing its socket and once by the broker
// (rabbitmqctl close_connection, when the broker is local). The consumer
// reconnects each time; every key has exactly one effect.
func connectionDropped(t *testing.T, e env) {
	q := NewQueue(t, e.conn, e.typ, nil)
	name := "idemamqptest " + q.Name
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	cfg := amqp.Config{
		Properties: amqp.Table{"connection_name": name},
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := amqp.DefaultDial(10*time.Second)(network, addr)
			if err == nil {
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
			return c, err
		},
	}
	l, ev := NewLedger(), &Events{}
	g := NewGuard(t, e.store, idem.Config{})
	Start(t, q, NewConsumer(t, g, q, ev, charge(l, 3*time.Millisecond),
		idemamqp.WithConfig(cfg), idemamqp.WithConcurrency(4), idemamqp.WithPrefetch(8)))
	ks := keys("order", 600)
	var msgs []Msg
	for i, k := range ks {
		msgs = append(msgs, Msg{Key: k, Body: k})
		if i%10 == 0 {
			msgs = append(msgs, Msg{Key: k, Body: k}) // a duplicate
		}
	}
	q.Publish(msgs...)

	Eventually(t, 60*time.Second, "100 keys charged", func() bool { return l.Keys() >= 100 })
	mu.Lock()
	conns[len(conns)-1].Close() // the socket, under the client's feet
	mu.Unlock()
	Eventually(t, 60*time.Second, "reconnected after the socket closed", func() bool { return ev.Kind(idemamqp.EventConnected) >= 2 })
	Eventually(t, 60*time.Second, "300 keys charged", func() bool { return l.Keys() >= 300 })
	var closedByBroker bool
	t.Run("broker closes", func(t *testing.T) {
		CloseConnection(t, name)
		closedByBroker = true
	})
	if closedByBroker {
		Eventually(t, 60*time.Second, "reconnected after the broker closed the connection", func() bool {
			return ev.Kind(idemamqp.EventConnected) >= 3
		})
	}
	Eventually(t, 120*time.Second, "every key charged", func() bool { return l.Keys() >= len(ks) })
	Eventually(t, 60*time.Second, "every copy acked", func() bool { return ev.Kind(idemamqp.EventAcked) >= len(msgs) })
	l.Check(t, ks)
	if n := ev.Kind(idemamqp.EventDisconnected); n < 1 {
		t.Errorf("%d disconnections seen, want at least 1", n)
	}
}

// scopesNeverCross: two tenants send the same key; each tenant's message
// runs once, and a tenant's duplicate is a replay.
func scopesNeverCross(t *testing.T, e env) {
	q := NewQueue(t, e.conn, e.typ, nil)
	l, ev := NewLedger(), &Events{}
	h := func(ctx context.Context, d amqp.Delivery) error {
		l.Charge(d.Headers["tenant"].(string) + "/" + d.Headers["idempotency-key"].(string))
		return nil
	}
	g := NewGuard(t, e.store, idem.Config{})
	c, err := idemamqp.New(g, URL(), q.Name, h, idemamqp.WithObserver(ev.Observe), idemamqp.WithDiscardPoison(),
		idemamqp.WithScope(func(d amqp.Delivery) string { s, _ := d.Headers["tenant"].(string); return s }))
	if err != nil {
		t.Fatal(err)
	}
	Start(t, q, c)
	q.Publish(
		Msg{Key: "invoice-1", Body: "a", Headers: amqp.Table{"tenant": "acme"}},
		Msg{Key: "invoice-1", Body: "b", Headers: amqp.Table{"tenant": "globex"}},
		Msg{Key: "invoice-1", Body: "a", Headers: amqp.Table{"tenant": "acme"}},
	)
	Eventually(t, 30*time.Second, "three deliveries acked", func() bool { return ev.Kind(idemamqp.EventAcked) >= 3 })
	l.Check(t, []string{"acme/invoice-1", "globex/invoice-1"})
	if n := ev.Kind(idemamqp.EventDeadLettered) + ev.Kind(idemamqp.EventDiscarded); n != 0 {
		t.Errorf("%d poison: the same key with another body in another scope is not a reuse", n)
	}
}
