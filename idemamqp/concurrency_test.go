package idemamqp_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/idemamqp/idemamqptest"
	"github.com/idemgo/idem/storage"
)

// running tracks the handlers running: how many at most, and whether one
// key's ran twice at once.
type running struct {
	mu      sync.Mutex
	now     map[string]bool
	n, most int
	overlap []string
}

func (r *running) enter(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.now == nil {
		r.now = make(map[string]bool)
	}
	if r.now[key] {
		r.overlap = append(r.overlap, key)
	}
	r.now[key] = true
	r.n++
	r.most = max(r.most, r.n)
}

func (r *running) leave(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.now, key)
	r.n--
}

// At most WithConcurrency handlers run at once, and each key's once, when
// every key is published many times over, the copies in different orders,
// so that copies of one key reach handlers at the same time.
func TestConcurrentHandlersRunEachKeyOnce(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	ks := make([]string, 100)
	var msgs []idemamqptest.Msg
	for i := range ks {
		ks[i] = fmt.Sprintf("order-%03d", i)
	}
	for copy := range 5 {
		for i, k := range ks {
			if copy%2 == 1 {
				k = ks[len(ks)-1-i] // the copies in another order
			}
			msgs = append(msgs, idemamqptest.Msg{Key: k, Body: k})
		}
	}
	q.Publish(msgs...)
	l, r := idemamqptest.NewLedger(), &running{}
	const concurrency = 6
	h := func(_ context.Context, d amqp.Delivery) error {
		k := keyOf(d)
		r.enter(k)
		defer r.leave(k)
		time.Sleep(time.Millisecond)
		l.Charge(k)
		return nil
	}
	idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, h,
		idemamqp.WithConcurrency(concurrency), idemamqp.WithPrefetch(64)))
	idemamqptest.Eventually(t, 60*time.Second, "every copy acked", func() bool { return ev.Kind(idemamqp.EventAcked) >= len(msgs) })
	l.Check(t, ks)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.most > concurrency || len(r.overlap) > 0 {
		t.Errorf("%d handlers at once (want at most %d); keys run twice at once: %v", r.most, concurrency, r.overlap)
	}
}

// With a concurrency of 1 the handlers run one after another in the order
// the broker delivered the messages.
func TestConcurrencyOneKeepsDeliveryOrder(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	var want []string
	var msgs []idemamqptest.Msg
	for i := range 60 {
		k := fmt.Sprintf("order-%03d", i)
		want = append(want, k)
		msgs = append(msgs, idemamqptest.Msg{Key: k, Body: k})
	}
	q.Publish(msgs...)
	var mu sync.Mutex
	var got []string
	h := func(_ context.Context, d amqp.Delivery) error {
		mu.Lock()
		got = append(got, keyOf(d))
		mu.Unlock()
		return nil
	}
	idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, h,
		idemamqp.WithConcurrency(1), idemamqp.WithPrefetch(16)))
	idemamqptest.Eventually(t, 30*time.Second, "every message acked", func() bool { return ev.Kind(idemamqp.EventAcked) >= len(msgs) })
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("handled in the order %v, want %v", got, want)
	}
}

// A shutdown with several handlers running and deliveries waiting behind
// them: the running handlers finish and their outcomes are stored and
// acked; the waiting deliveries' handlers never start, their keys are
// left unclaimed (or released) and the broker has them back.
func TestShutdownWithConcurrentHandlers(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	const concurrency, n = 4, 24
	var msgs []idemamqptest.Msg
	for i := range n {
		k := fmt.Sprintf("order-%03d", i)
		msgs = append(msgs, idemamqptest.Msg{Key: k, Body: k})
	}
	var started atomic.Int64
	var ran sync.Map
	finish := make(chan struct{})
	h := func(_ context.Context, d amqp.Delivery) error {
		started.Add(1)
		<-finish
		ran.Store(keyOf(d), true)
		return nil
	}
	stop := idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, h,
		idemamqp.WithConcurrency(concurrency), idemamqp.WithPrefetch(n), idemamqp.WithDrainTimeout(30*time.Second)))
	q.Publish(msgs...)
	idemamqptest.Eventually(t, 10*time.Second, "every handler slot taken", func() bool { return started.Load() == concurrency })
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	time.Sleep(100 * time.Millisecond) // Run is stopping: it waits for the running handlers
	close(finish)
	<-stopped

	if n := started.Load(); n != concurrency {
		t.Errorf("%d handlers started, want only the %d running when Run began to stop", n, concurrency)
	}
	if n := ev.Kind(idemamqp.EventAcked); n != concurrency {
		t.Errorf("%d acks, want the %d finished handlers' deliveries", n, concurrency)
	}
	for _, m := range msgs {
		rec, err := g.Store().Get(context.Background(), g.ScopedStoreKey("", m.Key))
		_, done := ran.Load(m.Key)
		switch {
		case done && (err != nil || rec.Status != storage.StatusCompleted):
			t.Errorf("key %s, handled: record %+v, %v; want completed", m.Key, rec, err)
		case !done && err == nil && (rec.Status != storage.StatusInProgress || rec.Token != 0):
			t.Errorf("key %s, not handled: record %+v; want none, or released", m.Key, rec)
		}
	}
	idemamqptest.Eventually(t, 10*time.Second, "the others back in the queue", func() bool { return q.Ready(q.Name) == n-concurrency })
}
