package idemamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/adapter"
)

// Handler handles one delivery. Return nil to have the delivery acked
// once the outcome is stored; an error marked [idem.Permanent] to have it
// dead-lettered, with every later duplicate; any other error to have it
// delivered again after the retry delay.
//
// ctx carries the lease token ([idem.TokenFrom]) and is cancelled when the
// lease is lost, or when Run stops and the shutdown timeout has passed. The
// delivery's Acknowledger is nil: the consumer settles it, the handler must
// not.
type Handler func(ctx context.Context, d amqp.Delivery) error

// Consumer consumes a RabbitMQ queue and runs a [Handler] at most once to
// completion per idempotency key, with an [idem.Guard]. Create one with
// [New] and start it with [Consumer.Run].
type Consumer struct {
	g       *idem.Guard
	url     string
	queue   string
	handler Handler
	o       options
	running atomic.Bool
}

// ErrRunning is what [Consumer.Run] returns while another Run of the same
// Consumer has not returned.
var ErrRunning = errors.New("idemamqp: Run: the consumer is already running")

// PanicError is the error of a handler that panicked: the key is released
// and the delivery requeued, as for a retryable error, so that the
// Guard's MaxAttempts (or a quorum queue's x-delivery-limit) ends a
// delivery that panics every time.
type PanicError struct {
	Value any    // what the handler panicked with
	Stack []byte // the goroutine's stack at the panic
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("idemamqp: the handler panicked: %v", e.Value)
}

// New returns a Consumer of queue on the broker at url (an AMQP URI,
// amqp://user:password@host:port/vhost) that runs h under g. It fails when
// g or h is nil, the queue name is empty or longer than 255 bytes, the URL
// does not parse, an option is invalid, or no scope decision was made
// ([WithScope] or [WithSharedScope]).
//
// The queue must exist: the consumer declares only its delay queue. The
// Guard's Config.MaxKeyLen and Config.ValidateKey apply to the key alone.
func New(g *idem.Guard, url, queue string, h Handler, opts ...Option) (*Consumer, error) {
	switch {
	case g == nil:
		return nil, errors.New("idemamqp: New: Guard is nil")
	case h == nil:
		return nil, errors.New("idemamqp: New: Handler is nil")
	case queue == "":
		return nil, errors.New("idemamqp: New: the queue name is empty")
	case len(queue) > 255:
		return nil, fmt.Errorf("idemamqp: New: the queue name is %d bytes long, longer than 255", len(queue))
	}
	if _, err := amqp.ParseURI(url); err != nil {
		return nil, fmt.Errorf("idemamqp: New: the URL: %w", err)
	}
	c := &Consumer{g: g, url: url, queue: queue, handler: h}
	c.o.defaults()
	names := adapter.Names{Pkg: "idemamqp", Request: "amqp.Delivery", Key: "the " + DefaultKeyHeader + " header"}
	if err := adapter.Build(&c.o, &c.o.Policy, names, g, opts); err != nil {
		if !c.o.scoped {
			err = fmt.Errorf("%w%s", err, scopeThreat)
		}
		return nil, err
	}
	if err := c.o.check(queue); err != nil {
		return nil, err
	}
	return c, nil
}

// Queue returns the name of the queue the consumer consumes.
func (c *Consumer) Queue() string { return c.queue }

// DelayQueue returns the name of the consumer's delay queue, "" when it has
// none (see [WithDelayQueue]).
func (c *Consumer) DelayQueue() string { return *c.o.delayQueue }

// Run consumes until ctx ends, then stops cleanly and returns nil:
//
//   - It connects, declares the delay queue, sets the prefetch and
//     subscribes. When the connection or a channel drops, or the broker
//     cancels the subscription, it connects again, with a backoff
//     ([WithReconnectBackoff]), until ctx ends. Handlers running when the
//     connection dropped run to the end and store their outcome; the
//     broker delivers their unacknowledged deliveries again, and those
//     are then acked as duplicates.
//   - When ctx ends it takes no new delivery, lets running handlers finish
//     for the shutdown timeout ([WithShutdownTimeout]), then cancels their
//     contexts (their keys are released, their deliveries requeued), waits
//     for them to return and closes the connection; the broker requeues
//     every delivery not settled.
//
// Handlers run on at most [WithConcurrency] goroutines, none of which
// outlives Run. Run returns ErrRunning if the Consumer is already running.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)

	hctx, cancelHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHandlers(nil)
	r := &runner{c: c, hctx: hctx, stopping: ctx.Done(), slots: make(chan struct{}, c.o.concurrency)}
	// Each session has concurrency workers that take its deliveries
	// straight from amqp091, as a bare consumer's would; the slots bound
	// the handlers running at once across sessions, since the handlers of
	// a dropped connection run on.
	var workers sync.WaitGroup

	var last *session
	pause := c.o.reconnectMin
	for {
		s, err := r.connect(ctx)
		if err == nil {
			pause = c.o.reconnectMin
			r.observe(ctx, Event{Kind: EventConnected, Queue: c.queue})
			c.o.Logger().InfoContext(ctx, "idemamqp: consuming", slog.String("queue", c.queue))
			for range c.o.concurrency {
				workers.Go(func() { r.work(s) })
			}
			err = s.watch(ctx)
			if ctx.Err() != nil {
				last = s
				break
			}
			s.close()
			r.observe(ctx, Event{Kind: EventDisconnected, Queue: c.queue, Err: err})
			c.o.Logger().WarnContext(ctx, "idemamqp: disconnected; reconnecting", slog.String("queue", c.queue), slog.Any("error", err))
		} else if ctx.Err() != nil {
			break
		} else {
			c.o.Logger().WarnContext(ctx, "idemamqp: cannot connect; retrying", slog.String("queue", c.queue),
				slog.Duration("pause", pause), slog.Any("error", err))
		}
		if sleep(ctx, pause/2+rand.N(pause/2+1)) != nil {
			break
		}
		pause = min(2*pause, c.o.reconnectMax)
	}

	r.drain(cancelHandlers)
	if last != nil {
		last.close() // ends its deliveries, and so its workers
	}
	workers.Wait()
	return nil
}

// work handles the deliveries of s until its delivery channel closes. Once
// Run is stopping it takes them without handling them: the broker requeues
// them when the connection closes.
func (r *runner) work(s *session) {
	for d := range s.deliveries {
		start := time.Now()
		select {
		case r.slots <- struct{}{}:
		case <-r.stopping:
			continue
		}
		r.handleInSlot(job{s: s, d: d, start: start})
	}
}

// handleInSlot handles j unless Run is stopping, and gives its slot back
// even if the handler ends its goroutine (runtime.Goexit).
func (r *runner) handleInSlot(j job) {
	defer func() { <-r.slots }()
	select {
	case <-r.stopping:
	default:
		r.handle(j)
	}
}

// errShutdown cancels the handlers still running when the shutdown timeout
// passes.
var errShutdown = errors.New("idemamqp: the consumer stopped and its shutdown timeout passed")

// drain waits until no handler runs (it holds every slot, so none can
// start); past the shutdown timeout it cancels the handlers' contexts and
// waits for them to return.
func (r *runner) drain(cancel context.CancelCauseFunc) {
	t := time.NewTimer(r.c.o.shutdownTimeout)
	defer t.Stop()
	for held := 0; held < cap(r.slots); {
		select {
		case r.slots <- struct{}{}:
			held++
		case <-t.C:
			r.c.o.Logger().Warn("idemamqp: shutdown timeout passed; cancelling the running handlers",
				slog.String("queue", r.c.queue), slog.Duration("timeout", r.c.o.shutdownTimeout))
			cancel(errShutdown)
		}
	}
}

// runner is one Run of a Consumer.
type runner struct {
	c        *Consumer
	hctx     context.Context // the handlers' context: Run's values, cancelled after the shutdown timeout
	stopping <-chan struct{} // closed when Run's context ends
	slots    chan struct{}   // one per handler running, at most the concurrency
}

// job is one delivery a worker handles, with the session it came from.
type job struct {
	s     *session
	d     amqp.Delivery
	start time.Time
}

func (r *runner) handle(j job) {
	o := &r.c.o
	d := j.d
	ev := Event{Queue: r.c.queue, DeliveryTag: d.DeliveryTag, Redelivered: d.Redelivered}
	if j.s.isDead() {
		// Taken before the channel closed: the broker delivers it again.
		r.settled(j, ev, EventUnsettled, errChannelClosed)
		return
	}
	key, err := o.keyOf(d)
	ev.Key = key
	ev.Scope = o.Scope(d)
	var dec decision
	switch {
	case err != nil:
		dec = decision{action: actDeadLetter, reason: ReasonInvalidKey, cause: err}
	case key == "" && o.unkeyed == RunUnkeyed:
		dec = o.decide(idem.Result{}, r.call(r.hctx, d))
	case key == "":
		dec = decision{action: actDeadLetter, reason: ReasonMissingKey, cause: ErrNoKey}
	default:
		dec, ev.Replayed = r.guarded(j, ev.Scope, key)
	}
	r.settle(j, ev, dec)
}

// guarded runs the handler under the Guard and decides the settlement. A
// claim the store could not answer is tried again, with a backoff, while
// the delivery is held: the broker's redelivery count is not spent on a
// store outage. It reports whether the outcome was replayed.
func (r *runner) guarded(j job, scope, key string) (decision, bool) {
	o := &r.c.o
	payload := j.d.Body
	if o.fingerprint != nil {
		payload = o.fingerprint(j.d)
	}
	var ran bool
	fn := func(ctx context.Context) ([]byte, error) {
		ran = true
		return nil, r.call(ctx, j.d)
	}
	pause := 50 * time.Millisecond
	for {
		res, err := r.c.g.DoScoped(r.hctx, scope, key, payload, fn)
		if ran || !errors.Is(err, idem.ErrStoreUnavailable) {
			return o.decide(res, err), err == nil && res.Replayed
		}
		o.Logger().Warn("idemamqp: the store cannot claim the key; holding the delivery and trying again",
			slog.String("queue", r.c.queue), slog.String("scope", scope), slog.String("key", key),
			slog.Duration("pause", pause), slog.Any("error", err))
		if !r.wait(j.s, pause) {
			return decision{action: actRetry, cause: err}, false
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// call runs the handler on a copy of d that cannot settle itself, and
// turns a panic into a *PanicError.
func (r *runner) call(ctx context.Context, d amqp.Delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			r.c.o.Logger().ErrorContext(ctx, "idemamqp: the handler panicked", slog.String("queue", r.c.queue),
				slog.Any("panic", v), slog.String("stack", string(pe.Stack)))
			err = pe
		}
	}()
	d.Acknowledger = nil
	return r.c.handler(ctx, d)
}

// wait pauses for d; it reports false, at once, when the consumer stops or
// the delivery's session is dead.
func (r *runner) wait(s *session, d time.Duration) bool {
	if d <= 0 {
		return !s.isDead()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return !s.isDead()
	case <-r.stopping:
	case <-s.dead:
	}
	return false
}

// settle carries out dec on the delivery of j.
func (r *runner) settle(j job, ev Event, dec decision) {
	o := &r.c.o
	s, tag := j.s, j.d.DeliveryTag
	switch dec.action {
	case actAck:
		r.settled(j, ev, EventAcked, s.ch.Ack(tag, false))
		return
	case actDeadLetter:
		ev.Reason = dec.reason
		r.deadLetter(j, ev, dec.cause)
		return
	}
	delay := dec.delay
	if dec.busy {
		ev.Delay = o.busyDelay
		if *o.delayQueue != "" && r.delay(j, ev) {
			return
		}
		delay = o.busyDelay
	}
	// Hold the delivery, then requeue it; at once if the consumer stops.
	held := time.Now()
	if !r.wait(s, delay) && s.isDead() {
		r.settled(j, ev, EventUnsettled, errChannelClosed)
		return
	}
	ev.Delay, ev.Err = time.Since(held), dec.cause
	if err := s.ch.Nack(tag, false, true); err != nil {
		r.settled(j, ev, EventUnsettled, err)
		return
	}
	r.settled(j, ev, EventRequeued, nil)
}

// delay sends a copy of a busy delivery through the delay queue, to come
// back after the busy delay, and acks the delivery. It reports false,
// having done nothing the broker keeps, when the copy would not come back
// under the same key and scope, or the broker did not take it.
func (r *runner) delay(j job, ev Event) bool {
	o := &r.c.o
	back := returned(j.d, r.c.queue)
	if !r.sameRecord(j.d, back, ev.Scope, ev.Key) {
		o.Logger().Warn("idemamqp: a copy of this delivery would come back with another scope, key or fingerprint "+
			"(they read the user-id, exchange or routing key, which the delay queue does not keep); requeueing it instead",
			slog.String("queue", r.c.queue), slog.String("scope", ev.Scope), slog.String("key", ev.Key))
		return false
	}
	if err := j.s.publish(r.hctx, "", *o.delayQueue, publishing(j.d, nil)); err != nil {
		o.Logger().Warn("idemamqp: the delay queue did not take a busy delivery; requeueing it instead",
			slog.String("queue", r.c.queue), slog.String("delay_queue", *o.delayQueue), slog.Any("error", err))
		return false
	}
	// If this ack is lost, the broker delivers the original again beside
	// the copy: a duplicate, which the Guard answers.
	r.settled(j, ev, EventDelayed, j.s.ch.Ack(j.d.DeliveryTag, false))
	return true
}

// sameRecord reports whether back, the delivery d as it will come back
// from the delay queue, has d's scope, key and fingerprint.
func (r *runner) sameRecord(d, back amqp.Delivery, scope, key string) bool {
	o := &r.c.o
	if k, err := o.keyOf(back); err != nil || k != key {
		return false
	}
	if o.Scope(back) != scope {
		return false
	}
	return o.fingerprint == nil || string(o.fingerprint(back)) == string(o.fingerprint(d))
}

// The headers [WithDeadLetter] adds to a dead-lettered message. The cause
// and reason headers have the names the other idem consumers use.
const (
	CauseHeader  = "idem-dead-letter-cause"  // the error's message, on one line, at most 1 KiB
	ReasonHeader = "idem-dead-letter-reason" // a [Reason]
	QueueHeader  = "idem-dead-letter-queue"  // the queue it was consumed from
)

// maxCauseLen bounds the cause header.
const maxCauseLen = 1024

// causeText returns err's message on one line, cut to maxCauseLen bytes at
// a rune boundary.
func causeText(err error) string {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	if len(msg) <= maxCauseLen {
		return msg
	}
	cut := maxCauseLen
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}

// deadLetter settles a delivery that must never run again.
func (r *runner) deadLetter(j job, ev Event, cause error) {
	o := &r.c.o
	ev.Err = cause
	o.Logger().Warn("idemamqp: dead-lettering a delivery", slog.String("queue", r.c.queue),
		slog.String("scope", ev.Scope), slog.String("key", ev.Key), slog.String("reason", string(ev.Reason)), slog.Any("cause", cause))
	if dl := o.deadLetter; dl != nil {
		extra := amqp.Table{CauseHeader: causeText(cause), ReasonHeader: string(ev.Reason), QueueHeader: r.c.queue}
		err := j.s.publish(r.hctx, dl.exchange, dl.routingKey, publishing(j.d, extra))
		if err == nil {
			r.settled(j, ev, EventDeadLettered, j.s.ch.Ack(j.d.DeliveryTag, false))
			return
		}
		o.Logger().Error("idemamqp: the dead-letter exchange did not take a delivery; rejecting it to the queue's own",
			slog.String("queue", r.c.queue), slog.String("exchange", dl.exchange), slog.Any("error", err))
	}
	r.settled(j, ev, EventDeadLettered, j.s.ch.Reject(j.d.DeliveryTag, false))
}

// errChannelClosed is the cause of EventUnsettled for a delivery whose
// session ended before it could be settled.
var errChannelClosed = errors.New("idemamqp: the delivery's channel closed; the broker delivers it again")

// settled reports the settlement of kind, or EventUnsettled when err (the
// settling call's error) says it did not reach the broker.
func (r *runner) settled(j job, ev Event, kind EventKind, err error) {
	ev.Kind = kind
	if err != nil {
		ev.Kind, ev.Err = EventUnsettled, err
		r.c.o.Logger().Debug("idemamqp: a delivery was not settled; the broker delivers it again",
			slog.String("queue", r.c.queue), slog.String("key", ev.Key), slog.Any("error", err))
	}
	ev.Duration = time.Since(j.start)
	r.observe(r.hctx, ev)
}

func (r *runner) observe(ctx context.Context, e Event) {
	if r.c.o.observer != nil {
		r.c.o.observer(ctx, e)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
