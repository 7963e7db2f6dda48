package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/internal/demo"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
)

// The demo through RabbitMQ (--broker amqp://…): the same stream, crash
// points and handlers' logic as the in-process queue, with a queue of the
// run's own on the broker and one connection per consumer process. A
// crashed process closes its socket on the spot, so nothing it would have
// acked reaches the broker, which requeues its unacknowledged deliveries
// at once; the keys it held come free once their leases end, and until
// then their deliveries go round idemamqp's delay queue.

// The headers of a demo message.
const (
	amqpDemoIndex = "idem-demo-index" // the message's index in the stream
	amqpDemoKey   = "order-id"        // the idempotency key
)

// amqpDemoPrefetch is each consumer process's prefetch; it handles one
// delivery at a time.
const amqpDemoPrefetch = 4

// amqpRunStream is runStream through the RabbitMQ at url. It takes the
// handlers newHandler makes apart for what they hold: the ledger of the
// naive one, and the Guard of the guarded one, which runs behind idemamqp.
func amqpRunStream(url string) demo.RunFunc {
	return func(ctx context.Context, o demo.Options, name string, stream []demo.Message, plan demo.CrashPlan, stderr io.Writer,
		newHandler func(p *demo.Process, l *demo.Ledger) (demo.Handler, func(), error)) (demo.Report, error) {
		admin, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "idem demo"}})
		if err != nil {
			return demo.Report{}, fmt.Errorf("idem: demo: connecting to RabbitMQ at %s: %w", storeurl.Redact(url), err)
		}
		defer admin.Close()
		r := &amqpRun{url: url, msgs: stream, plan: plan, acks: demo.NewAcks(stream), attempts: make([]atomic.Int32, len(stream))}
		if err := r.setUp(ctx, admin, name); err != nil {
			return demo.Report{}, err
		}
		defer r.tearDown(admin)

		return demo.RunConsumers(ctx, o, name, len(stream), r.acks.Count, r.acks.All(), stderr,
			func(ctx context.Context, l *demo.Ledger, stats *demo.RunStats) error {
				return r.consume(ctx, stats, func(p *demo.Process) (demo.Handler, func(), error) { return newHandler(p, l) })
			},
			func() demo.BrokerStats { return r.acks.Stats(o.Messages) })
	}
}

// amqpRun is one run of the demo through RabbitMQ.
type amqpRun struct {
	url    string
	queue  string // its name on the broker
	delayQ string // idemamqp's delay queue of it, if the guarded run makes one
	msgs   []demo.Message
	plan   demo.CrashPlan

	attempts []atomic.Int32 // deliveries so far, by message index
	acks     *demo.Acks
}

// setUp declares the run's queue and publishes the messages, each copy as
// a message of its own, with publisher confirms.
func (r *amqpRun) setUp(ctx context.Context, conn *amqp.Connection, name string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	r.queue = "idem-demo." + name + "." + rand.Text()[:8]
	r.delayQ = idemamqp.DelayQueueName(r.queue, demo.RetryDelay)
	if _, err := ch.QueueDeclare(r.queue, true, false, false, false, amqp.Table{"x-expires": int64(time.Hour / time.Millisecond)}); err != nil {
		return fmt.Errorf("idem: demo: declaring queue %s: %w", r.queue, err)
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confs := make([]*amqp.DeferredConfirmation, 0, len(r.msgs))
	for i, m := range r.msgs {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", r.queue, true, false, amqp.Publishing{
			Headers:      amqp.Table{amqpDemoIndex: strconv.Itoa(i), amqpDemoKey: m.Key},
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/json",
			Body:         m.Payload,
		})
		if err != nil {
			return err
		}
		confs = append(confs, c)
	}
	for _, c := range confs {
		if ok, err := c.WaitContext(ctx); !ok || err != nil {
			return fmt.Errorf("idem: demo: the broker did not confirm a message: %v", err)
		}
	}
	return nil
}

// tearDown deletes the run's queues.
func (r *amqpRun) tearDown(conn *amqp.Connection) {
	for _, q := range []string{r.queue, r.delayQ} {
		if q == "" {
			continue
		}
		if ch, err := conn.Channel(); err == nil {
			ch.QueueDelete(q, false, false, false)
			ch.Close()
		}
	}
}

// consume runs one consumer slot until every message is acked or ctx
// ends: a process with a connection of its own, and, each time that
// process crashes, a fresh one.
func (r *amqpRun) consume(ctx context.Context, stats *demo.RunStats, newHandler func(p *demo.Process) (demo.Handler, func(), error)) error {
	for ctx.Err() == nil {
		p := &amqpProcess{Process: &demo.Process{Stats: stats}, r: r, crashed: make(chan struct{}), tags: map[uint64]amqpReceipt{}, keys: map[string]amqpReceipt{}}
		h, closeHandler, err := newHandler(p.Process)
		if err != nil {
			return err
		}
		err = r.runProcess(ctx, p, h)
		closeHandler()
		if err != nil {
			return err
		}
		if !p.Dead.Load() {
			return nil
		}
	}
	return nil
}

// runProcess runs process p until it crashes or ctx ends.
func (r *amqpRun) runProcess(ctx context.Context, p *amqpProcess, h demo.Handler) error {
	cfg := amqp.Config{
		Properties: amqp.Table{"connection_name": "idem demo consumer"},
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := amqp.DefaultDial(10*time.Second)(network, addr)
			if err == nil {
				p.setConn(c)
			}
			return c, err
		},
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		// The process's main goroutine: a crash ends it on the spot.
		var err error
		defer func() { done <- err }()
		switch h := h.(type) {
		case demo.NaiveHandler:
			err = r.naive(pctx, p, cfg, h.Ledger)
		case demo.GuardedHandler:
			err = r.guarded(pctx, p, cfg, h)
		default:
			err = fmt.Errorf("idem: demo: no RabbitMQ consumer for handler %T", h)
		}
	}()
	select {
	case err := <-done:
		return err
	case <-p.crashed:
		cancel()
		return <-done
	}
}

// naive consumes like a client without idempotency: receive, charge, ack.
func (r *amqpRun) naive(ctx context.Context, p *amqpProcess, cfg amqp.Config, l *demo.Ledger) error {
	conn, err := amqp.DialConfig(r.url, cfg)
	if err != nil {
		return fmt.Errorf("idem: demo: connecting to RabbitMQ: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(amqpDemoPrefetch, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(r.queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return nil
			}
			rc := p.receive(d)
			if rc.point == demo.CrashBeforeCharge {
				p.crash(rc.point)
			}
			l.Charge(r.msgs[rc.idx].Order)
			if rc.point == demo.CrashAfterCharge {
				p.crash(rc.point)
			}
			if d.Ack(false) == nil {
				r.ack(rc.idx)
			}
		}
	}
}

// guarded consumes with idemamqp over the process's Guard. The process dies
// at a delivery's crash point: before the charge inside the claim, after
// the outcome is stored and before the ack, or, for a delivery that runs
// nothing (a duplicate, or a busy key), before it is settled.
func (r *amqpRun) guarded(ctx context.Context, p *amqpProcess, cfg amqp.Config, h demo.GuardedHandler) error {
	gcfg := h.Guard.Config()
	gcfg.Observer = func(_ context.Context, e idem.Event) {
		point := p.keyed(e.Key).point
		switch {
		case point == demo.NoCrash:
		case e.Op == idem.OpClaim && e.Err == nil && e.Outcome != storage.Acquired:
			p.crash(point) // before settling a delivery that runs nothing
		case e.Op == idem.OpComplete && e.Err == nil && point == demo.CrashAfterCharge:
			p.crash(point) // the outcome is stored, the ack never goes out
		}
	}
	g, err := idem.New(h.Guard.Store(), gcfg) // the process's store: it refuses a dead process
	if err != nil {
		return err
	}
	defer g.Close()
	charge := func(ctx context.Context, d amqp.Delivery) error {
		if p.Dead.Load() {
			runtime.Goexit() // the process is gone
		}
		rc := p.receive(d)
		if rc.point == demo.CrashBeforeCharge {
			p.crash(rc.point) // holding the claim: it stays until the lease ends
		}
		if err := ctx.Err(); err != nil {
			return err // the lease is lost: someone else may charge now
		}
		p.Charge(ctx, h.Ledger, r.msgs[rc.idx].Order)
		return nil
	}
	c, err := idemamqp.New(g, r.url, r.queue, charge,
		idemamqp.WithSharedScope(),
		idemamqp.WithKeyFunc(func(d amqp.Delivery) (string, error) {
			p.receive(d)
			key, _ := d.Headers[amqpDemoKey].(string)
			return key, nil
		}),
		// Every order has a key and the handler never fails for good:
		// nothing is poison. Were something poison, it would be rejected,
		// and the run would report its order unacked.
		idemamqp.WithDiscardPoison(),
		idemamqp.WithPrefetch(amqpDemoPrefetch), idemamqp.WithConcurrency(1),
		idemamqp.WithBusyDelay(demo.RetryDelay), idemamqp.WithRetryBackoff(demo.RetryDelay, demo.RetryDelay),
		idemamqp.WithReconnectBackoff(time.Second, time.Second), // a process that lost its connection crashed
		idemamqp.WithDrainTimeout(0),
		idemamqp.WithConfig(cfg),
		idemamqp.WithObserver(func(_ context.Context, e idemamqp.Event) {
			if e.Kind == idemamqp.EventAcked {
				r.ack(p.index(e.DeliveryTag))
			}
		}))
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// ack records that message idx was acked, and ends the run once all were.
func (r *amqpRun) ack(idx int) {
	if idx >= 0 {
		r.acks.Ack(idx)
	}
}

// amqpReceipt is a delivery as a process received it.
type amqpReceipt struct {
	idx   int
	point demo.CrashPoint
}

// amqpProcess is a consumer process with its connection's socket.
type amqpProcess struct {
	*demo.Process
	r       *amqpRun
	once    sync.Once
	crashed chan struct{}

	mu   sync.Mutex
	conn net.Conn
	tags map[uint64]amqpReceipt // by delivery tag
	// keys holds the last delivery received of each key: the Guard's
	// events name a key, and idemamqp claims the deliveries of its
	// prefetch buffer before their handlers run and stores their outcomes
	// after, so the delivery of an event is not the one a handler runs.
	keys map[string]amqpReceipt
}

func (p *amqpProcess) setConn(c net.Conn) {
	p.mu.Lock()
	p.conn = c
	p.mu.Unlock()
}

// receive records a delivery: its attempt and its crash point, and
// returns them. Idempotent per delivery tag, since idemamqp reads the key
// of a delivery before its handler runs, and may read it twice.
func (p *amqpProcess) receive(d amqp.Delivery) amqpReceipt {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rc, ok := p.tags[d.DeliveryTag]; ok {
		return rc
	}
	idx, _ := strconv.Atoi(fmt.Sprint(d.Headers[amqpDemoIndex]))
	attempt := int(p.r.attempts[idx].Add(1))
	p.r.acks.Delivered(idx, attempt)
	rc := amqpReceipt{idx: idx, point: p.r.plan.At(idx, attempt)}
	p.tags[d.DeliveryTag] = rc
	if key, ok := d.Headers[amqpDemoKey].(string); ok {
		p.keys[key] = rc
	}
	return rc
}

// keyed returns the last delivery received of key.
func (p *amqpProcess) keyed(key string) amqpReceipt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys[key]
}

// index returns the message index of the delivery with tag, or -1.
func (p *amqpProcess) index(tag uint64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rc, ok := p.tags[tag]; ok {
		return rc.idx
	}
	return -1
}

// crash kills the process at point: its socket closes before anything
// else can go out on it. It does not return.
func (p *amqpProcess) crash(point demo.CrashPoint) {
	p.Dead.Store(true)
	p.once.Do(func() {
		p.mu.Lock()
		if p.conn != nil {
			p.conn.Close()
		}
		p.mu.Unlock()
		close(p.crashed)
	})
	p.Process.Crash(point)
}
