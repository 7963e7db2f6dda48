package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/internal/demo"
)

// The demo through NATS JetStream (--broker nats://…): the same stream,
// crash points and handlers' logic as the in-process queue, with a stream
// of the run's own on the server for the queue, AckWait for its
// visibility timeout, and one NATS connection per consumer process. A
// crashed process closes its connection on the spot, so nothing it would
// have acked, naked or extended reaches the server: its messages come back
// after AckWait, and the keys it held once their leases end.

// The headers of a demo message.
const (
	natsDemoIndex = "Idem-Demo-Index" // the message's index in the stream
	natsDemoKey   = "Order-Id"        // the idempotency key
)

// natsDemoBatch is the Fetch batch of both consumers.
const natsDemoBatch = 4

// natsRunStream is runStream through the JetStream server at url. It takes
// the handlers newHandler makes apart for what they hold: the ledger of the
// naive one, and the Guard of the guarded one, which runs behind idemnats.
func natsRunStream(url string) demo.RunFunc {
	return func(ctx context.Context, o demo.Options, name string, stream []demo.Message, plan demo.CrashPlan, stderr io.Writer,
		newHandler func(p *demo.Process, l *demo.Ledger) (demo.Handler, func(), error)) (demo.Report, error) {
		admin, err := nats.Connect(url, nats.Name("idem demo"))
		if err != nil {
			return demo.Report{}, fmt.Errorf("idem: demo: connecting to NATS at %s: %w", url, err)
		}
		defer admin.Close()
		js, err := jetstream.New(admin)
		if err != nil {
			return demo.Report{}, err
		}
		r := &natsRun{url: url, msgs: stream, plan: plan, acks: demo.NewAcks(stream)}
		if err := r.setUp(ctx, js, name); err != nil {
			return demo.Report{}, err
		}
		defer js.DeleteStream(context.WithoutCancel(ctx), r.stream)

		return demo.RunConsumers(ctx, o, name, len(stream), r.acks.Count, r.acks.All(), stderr,
			func(ctx context.Context, l *demo.Ledger, stats *demo.RunStats) error {
				return r.consume(ctx, stats, func(p *demo.Process) (demo.Handler, func(), error) { return newHandler(p, l) })
			},
			func() demo.BrokerStats { return r.acks.Stats(o.Messages) })
	}
}

// natsRun is one run of the demo through JetStream.
type natsRun struct {
	url    string
	stream string // its name on the server
	msgs   []demo.Message
	plan   demo.CrashPlan

	acks *demo.Acks
}

// setUp creates the run's stream and its consumer, and publishes the
// messages, each copy as a message of its own (it has no Nats-Msg-Id: the
// copies are those that got past the duplicate window).
func (r *natsRun) setUp(ctx context.Context, js jetstream.JetStream, name string) error {
	r.stream = "IDEM_DEMO_" + strings.ToUpper(name) + "_" + rand.Text()[:8]
	subject := strings.ToLower(r.stream) + ".orders"
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: r.stream, Subjects: []string{subject}, Storage: jetstream.MemoryStorage})
	if err != nil {
		return fmt.Errorf("idem: demo: creating stream %s (is JetStream enabled? nats-server -js): %w", r.stream, err)
	}
	if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       "demo",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       demo.Visibility,
		MaxAckPending: -1,
	}); err != nil {
		js.DeleteStream(context.WithoutCancel(ctx), r.stream)
		return err
	}
	for i, m := range r.msgs {
		msg := &nats.Msg{Subject: subject, Data: m.Payload, Header: nats.Header{
			natsDemoIndex: {strconv.Itoa(i)},
			natsDemoKey:   {m.Key},
		}}
		if _, err := js.PublishMsgAsync(msg); err != nil {
			js.DeleteStream(context.WithoutCancel(ctx), r.stream)
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		js.DeleteStream(context.WithoutCancel(ctx), r.stream)
		return ctx.Err()
	}
}

// consume runs one consumer slot until every message is acked or ctx
// ends: a process with a connection of its own that consumes the stream
// with the handler newHandler makes for it, and, each time that process
// crashes, a fresh one.
func (r *natsRun) consume(ctx context.Context, stats *demo.RunStats, newHandler func(p *demo.Process) (demo.Handler, func(), error)) error {
	for ctx.Err() == nil {
		p := &natsProcess{Process: &demo.Process{Stats: stats}, crashed: make(chan struct{})}
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
func (r *natsRun) runProcess(ctx context.Context, p *natsProcess, h demo.Handler) error {
	nc, err := nats.Connect(r.url, nats.Name("idem demo consumer"))
	if err != nil {
		return fmt.Errorf("idem: demo: connecting to NATS at %s: %w", r.url, err)
	}
	p.nc = nc
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, r.stream, "demo")
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	wrapped := &natsDemoConsumer{Consumer: cons, r: r, p: p}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		// The process's main goroutine: a crash ends it on the spot.
		var err error
		defer func() { done <- err }()
		switch h := h.(type) {
		case demo.NaiveHandler:
			r.naive(pctx, wrapped, h.Ledger)
		case demo.GuardedHandler:
			var c *idemnats.Consumer
			c, err = idemnats.New(h.Guard, wrapped, r.guarded(p, h.Ledger),
				idemnats.WithSharedScope(), idemnats.WithKeyHeader(natsDemoKey), idemnats.WithBatchSize(natsDemoBatch),
				// Every order has a key and the handler never fails for
				// good: nothing is poison. Were something poison, it would
				// be terminated, and the run would report its order unacked.
				idemnats.WithDiscardPoison(),
				idemnats.WithFetchWait(250*time.Millisecond), idemnats.WithBusyDelay(demo.RetryDelay),
				idemnats.WithRetryBackoff(demo.RetryDelay, demo.RetryDelay), idemnats.WithDrainTimeout(0))
			if err == nil {
				err = c.Run(pctx)
			}
		default:
			err = fmt.Errorf("idem: demo: no NATS consumer for handler %T", h)
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

// naive consumes like a client without idempotency: fetch, charge, ack.
func (r *natsRun) naive(ctx context.Context, cons jetstream.Consumer, l *demo.Ledger) {
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		mb, err := cons.Fetch(natsDemoBatch, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			continue
		}
		for msg := range mb.Messages() {
			m := msg.(*natsDemoMsg)
			if m.point == demo.CrashBeforeCharge {
				m.p.crash(m.point)
			}
			l.Charge(r.msgs[m.idx].Order)
			m.Ack() // crashes at crashAfterCharge
		}
		cancel()
	}
}

// guarded is the handler behind idemnats: charge, with the demo's crash
// inside the claim. A crash after the charge happens when idemnats settles
// the message, after it stored the outcome (natsDemoMsg).
func (r *natsRun) guarded(p *natsProcess, l *demo.Ledger) idemnats.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		if p.Dead.Load() {
			runtime.Goexit() // the process is gone
		}
		m := msg.(*natsDemoMsg)
		if m.point == demo.CrashBeforeCharge {
			p.crash(m.point) // holding the claim: it stays until the lease ends
		}
		if err := ctx.Err(); err != nil {
			return err // the lease is lost: someone else may charge now
		}
		p.Charge(ctx, l, r.msgs[m.idx].Order)
		return nil
	}
}

// natsProcess is a consumer process with its NATS connection.
type natsProcess struct {
	*demo.Process
	nc      *nats.Conn
	once    sync.Once
	crashed chan struct{}
}

// crash kills the process at point: its connection closes before anything
// else can go out on it. It does not return.
func (p *natsProcess) crash(point demo.CrashPoint) {
	p.Dead.Store(true)
	p.once.Do(func() {
		p.nc.Close()
		close(p.crashed)
	})
	p.Process.Crash(point)
}

// natsDemoConsumer is a process's view of the JetStream consumer: it
// counts deliveries and wraps every message, so that the process dies at
// the message's crash point when it settles it, and a dead process settles
// nothing.
type natsDemoConsumer struct {
	jetstream.Consumer
	r *natsRun
	p *natsProcess
}

func (c *natsDemoConsumer) Fetch(batch int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	mb, err := c.Consumer.Fetch(batch, opts...)
	if err != nil {
		return nil, err
	}
	out := make(chan jetstream.Msg, batch)
	go func() {
		defer close(out)
		for msg := range mb.Messages() {
			out <- c.wrap(msg)
		}
	}()
	return &natsDemoMsgs{MessageBatch: mb, msgs: out}, nil
}

func (c *natsDemoConsumer) wrap(msg jetstream.Msg) jetstream.Msg {
	m := &natsDemoMsg{Msg: msg, r: c.r, p: c.p}
	m.idx, _ = strconv.Atoi(msg.Headers().Get(natsDemoIndex))
	attempt := 1
	if md, err := msg.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	c.r.acks.Delivered(m.idx, attempt)
	m.point = c.r.plan.At(m.idx, attempt)
	return m
}

type natsDemoMsgs struct {
	jetstream.MessageBatch
	msgs chan jetstream.Msg
}

func (b *natsDemoMsgs) Messages() <-chan jetstream.Msg { return b.msgs }

// natsDemoMsg is a message as a process sees it.
type natsDemoMsg struct {
	jetstream.Msg
	r     *natsRun
	p     *natsProcess
	idx   int
	point demo.CrashPoint
}

// settle is every way of settling the message: the process dies first if
// the message's crash point says so, and a dead process sends nothing.
func (m *natsDemoMsg) settle(send func() error) error {
	if m.p.Dead.Load() {
		return demo.ErrProcessDead
	}
	if m.point != demo.NoCrash {
		// After the charge (and, for idem, its stored outcome); or before
		// it, when this delivery did not run it (a duplicate, or busy).
		m.p.crash(m.point)
	}
	return send()
}

func (m *natsDemoMsg) Ack() error {
	return m.settle(func() error {
		err := m.Msg.Ack()
		if err == nil {
			m.r.acks.Ack(m.idx)
		}
		return err
	})
}

func (m *natsDemoMsg) Nak() error { return m.settle(m.Msg.Nak) }
func (m *natsDemoMsg) NakWithDelay(d time.Duration) error {
	return m.settle(func() error { return m.Msg.NakWithDelay(d) })
}
func (m *natsDemoMsg) Term() error { return m.settle(m.Msg.Term) }

func (m *natsDemoMsg) InProgress() error {
	if m.p.Dead.Load() {
		return demo.ErrProcessDead
	}
	return m.Msg.InProgress()
}
