package idemamqp

import (
	"cmp"
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
// At most [WithConcurrency] handlers run at once, on goroutines none of
// which outlives Run; a handler that had not started when ctx ended does
// not start (its key is released, its delivery requeued). Run returns
// ErrRunning if the Consumer is already running.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)

	hctx, cancelHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHandlers(nil)
	r := &runner{c: c, hctx: hctx, stopping: ctx.Done(), slots: make(chan struct{}, c.o.concurrency),
		groupSize: c.o.groupSize(), lanes: make(chan struct{}, c.o.lanes())}
	// Each session has a dispatcher that takes its deliveries from
	// amqp091 and hands them to goroutines in groups; the slots bound the
	// handlers running at once across sessions, since the handlers of a
	// dropped connection run on.
	var dispatchers sync.WaitGroup

	var last *session
	pause := c.o.reconnectMin
	for {
		s, err := r.connect(ctx)
		if err == nil {
			pause = c.o.reconnectMin
			r.observe(ctx, Event{Kind: EventConnected, Queue: c.queue})
			c.o.Logger().InfoContext(ctx, "idemamqp: consuming", slog.String("queue", c.queue))
			dispatchers.Go(func() { r.dispatch(s) })
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
		last.close() // ends its deliveries, and so its dispatcher
	}
	dispatchers.Wait()
	return nil
}

// dispatch takes the deliveries of s until its delivery channel closes and
// hands them, in groups, to goroutines that run them under the Guard: the
// deliveries already waiting when one arrives (up to the group size, see
// [WithConcurrency]) form one group, whose keys are claimed in one store
// round trip and whose outcomes are stored in one. With a concurrency of 1,
// one group at a time, so that the handlers run in the order of the
// deliveries. Once Run is stopping it
// takes the deliveries without handling them: the broker requeues them when
// the connection closes.
func (r *runner) dispatch(s *session) {
	for d := range s.deliveries {
		group := []job{{s: s, d: d, start: time.Now()}}
		select {
		case r.lanes <- struct{}{}:
		case <-r.stopping:
			continue
		}
	gather:
		for len(group) < r.groupSize {
			select {
			case d, ok := <-s.deliveries:
				if !ok {
					break gather
				}
				group = append(group, job{s: s, d: d, start: time.Now()})
			default:
				break gather
			}
		}
		r.mu.Lock()
		if r.closing {
			r.mu.Unlock()
			<-r.lanes
			continue
		}
		r.inflight.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.inflight.Done()
			defer func() { <-r.lanes }()
			r.handleGroup(group)
		}()
	}
}

// errShutdown cancels the handlers still running when the shutdown timeout
// passes.
var errShutdown = errors.New("idemamqp: the consumer stopped and its shutdown timeout passed")

// errStopping is the outcome of a delivery whose handler was about to start
// when Run began to stop: its key is released and it is requeued.
var errStopping = errors.New("idemamqp: the consumer is stopping; the handler did not start")

// drain waits until no handler runs (it holds every slot, so none can
// start); past the shutdown timeout it cancels the handlers' contexts and
// waits for them to return. Then it waits for the groups in flight to
// store their outcomes and settle their deliveries.
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
	r.mu.Lock()
	r.closing = true // no group starts from here on
	r.mu.Unlock()
	r.inflight.Wait()
}

// runner is one Run of a Consumer.
type runner struct {
	c         *Consumer
	hctx      context.Context // the handlers' context: Run's values, cancelled after the shutdown timeout
	stopping  <-chan struct{} // closed when Run's context ends
	slots     chan struct{}   // one per handler running, at most the concurrency
	groupSize int             // the most deliveries one group holds
	lanes     chan struct{}   // one per group being handled

	mu       sync.Mutex
	closing  bool           // guarded by mu: no group may start
	inflight sync.WaitGroup // the groups being handled
}

// job is one delivery, with the session it came from.
type job struct {
	s     *session
	d     amqp.Delivery
	start time.Time
}

// keyed is a delivery whose key goes to the Guard, with its event.
type keyed struct {
	j  job
	ev Event
}

// handleGroup handles a group of deliveries of one session: those without
// a usable key at once, the others under the Guard.
func (r *runner) handleGroup(js []job) {
	o := &r.c.o
	var ks []keyed
	for _, j := range js {
		d := j.d
		ev := Event{Queue: r.c.queue, DeliveryTag: d.DeliveryTag, Redelivered: d.Redelivered}
		if j.s.isDead() {
			// Taken before the channel closed: the broker delivers it again.
			r.settled(j, ev, EventUnsettled, errChannelClosed)
			continue
		}
		key, err := o.keyOf(d)
		ev.Key = key
		ev.Scope = o.Scope(d)
		switch {
		case err != nil:
			r.settle(j, ev, decision{action: actDeadLetter, reason: ReasonInvalidKey, cause: err})
		case key == "" && o.unkeyed == RunUnkeyed:
			r.settleLater(j, ev, o.decide(idem.Result{}, r.callInSlot(r.hctx, d)))
		case key == "":
			r.settle(j, ev, decision{action: actDeadLetter, reason: ReasonMissingKey, cause: ErrNoKey})
		default:
			ks = append(ks, keyed{j: j, ev: ev})
		}
	}
	if len(ks) > 0 {
		r.guarded(ks)
	}
}

// guarded runs the handlers of ks under the Guard and settles their
// deliveries: DoBatchUnordered claims their keys in one store round trip,
// runs the handlers one after another, each once a handler slot is free,
// and stores their outcomes in one round trip. It goes on past a delivery
// that does not finish, and stops only where none after can run (the
// store down, the Guard closed): those (idem.ErrNotRun) are tried again.
// A claim the store could not answer is tried again, with a backoff, while
// the deliveries are held: the broker's redelivery count is not spent on a
// store outage.
func (r *runner) guarded(ks []keyed) {
	o := &r.c.o
	s := ks[0].j.s
	pause := 50 * time.Millisecond
	ops := make([]idem.BatchOp, 0, len(ks))
	for len(ks) > 0 {
		ops = ops[:0]
		for _, k := range ks {
			payload := k.j.d.Body
			if o.fingerprint != nil {
				payload = o.fingerprint(k.j.d)
			}
			ops = append(ops, idem.BatchOp{Scope: k.ev.Scope, Key: k.ev.Key, Payload: payload})
		}
		ran := make([]bool, len(ks))
		fn := func(ctx context.Context, i int) ([]byte, error) {
			ran[i] = true
			return nil, r.callInSlot(ctx, ks[i].j.d)
		}
		var res []idem.BatchResult
		if len(ops) == 1 {
			// A group of one, the common case when deliveries arrive one
			// at a time: Do's own path, without a batch's bookkeeping.
			op := ops[0]
			v, err := r.c.g.DoScoped(r.hctx, op.Scope, op.Key, op.Payload, func(ctx context.Context) ([]byte, error) { return fn(ctx, 0) })
			res = []idem.BatchResult{{Result: v, Err: err}}
		} else {
			res = r.c.g.DoBatchUnordered(r.hctx, ops, fn)
		}
		var again []keyed
		var outage error
		for i, br := range res {
			k := ks[i]
			switch {
			case errors.Is(br.Err, idem.ErrNotRun):
				again = append(again, k)
			case !ran[i] && errors.Is(br.Err, idem.ErrStoreUnavailable):
				again = append(again, k)
				outage = cmp.Or(outage, br.Err)
			default:
				k.ev.Replayed = br.Err == nil && br.Replayed
				r.settleLater(k.j, k.ev, o.decide(br.Result, br.Err))
			}
		}
		ks = again
		if len(ks) == 0 {
			return
		}
		wait := time.Duration(0)
		if outage != nil {
			o.Logger().Warn("idemamqp: the store cannot claim the keys; holding the deliveries and trying again",
				slog.String("queue", r.c.queue), slog.Int("deliveries", len(ks)), slog.String("key", ks[0].ev.Key),
				slog.Duration("pause", pause), slog.Any("error", outage))
			wait = pause
			pause = min(2*pause, 5*time.Second)
		}
		if !r.wait(s, wait) {
			cause := cmp.Or(outage, errStopping)
			for _, k := range ks {
				r.settleLater(k.j, k.ev, decision{action: actRetry, cause: cause})
			}
			return
		}
	}
}

// callInSlot runs the handler once a handler slot is free, unless Run is
// stopping: then it returns errStopping without running it.
func (r *runner) callInSlot(ctx context.Context, d amqp.Delivery) error {
	select {
	case <-r.stopping:
		return errStopping
	default:
	}
	select {
	case r.slots <- struct{}{}:
	case <-r.stopping:
		return errStopping
	}
	defer func() { <-r.slots }()
	select {
	case <-r.stopping:
		return errStopping
	default:
	}
	return r.call(ctx, d)
}

// settleLater settles j as dec says; a settlement that holds the delivery
// for a delay does so on a goroutine of its own, so that the group's other
// deliveries are settled meanwhile.
func (r *runner) settleLater(j job, ev Event, dec decision) {
	if dec.action != actRetry {
		r.settle(j, ev, dec)
		return
	}
	r.inflight.Add(1) // within a group in flight: the count is not zero
	go func() {
		defer r.inflight.Done()
		r.settle(j, ev, dec)
	}()
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
