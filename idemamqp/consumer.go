package idemamqp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/adapter"
	"github.com/idemgo/idem/internal/ahead"
	"github.com/idemgo/idem/internal/chassis"
)

// Handler handles one delivery. Return nil to have the delivery acked
// once the outcome is stored; an error marked [idem.Permanent] to make it
// poison (see [WithDeadLetter]), with every later duplicate; any other
// error to have it delivered again after the retry backoff, until it
// failed WithMaxAttempts times.
//
// ctx carries the lease token ([idem.TokenFrom]) and the W3C trace context
// of the message's headers (consumer.TraceFrom), and is cancelled when the
// lease is lost, or when Run stops and the drain timeout has passed. The
// delivery's Acknowledger is nil: the consumer settles it, the handler
// must not.
type Handler func(ctx context.Context, d amqp.Delivery) error

// Consumer consumes a RabbitMQ queue and runs a [Handler] at most once to
// completion per idempotency key, with an [idem.Guard]. Create one with
// [New] and start it with [Consumer.Run].
type Consumer struct {
	g       *idem.Guard
	url     string
	shown   string   // url without its password, for errors and logs
	secrets []string // the password, as written and decoded, kept out of errors and logs
	queue   string
	handler Handler
	o       options
	tries   *chassis.Tries // handler failures in a row, by delivery identity
	ahead   ahead.Claimer  // g's claim and finish apart
	running atomic.Bool
}

// ErrRunning is what [Consumer.Run] returns while another Run of the same
// Consumer has not returned.
var ErrRunning = errors.New("idemamqp: Run: the consumer is already running")

// broker is what the chassis knows of RabbitMQ's deliveries.
var broker = chassis.Broker[amqp.Delivery]{
	Names:            adapter.Names{Pkg: "idemamqp", Request: "amqp.Delivery", Key: "the " + DefaultKeyHeader + " header"},
	KeyHeader:        DefaultKeyHeader,
	Header:           headerValues,
	CheckHeader:      checkHeader,
	Body:             func(d amqp.Delivery) []byte { return d.Body },
	ValidHeaderName:  validHeaderName,
	DeadLetterOption: "WithDeadLetter(exchange, routingKey)",
}

// New returns a Consumer of queue on the broker at url (an AMQP URI,
// amqp://user:password@host:port/vhost) that runs h under g. It fails when
// g or h is nil, the queue name is empty or longer than 255 bytes, the URL
// does not parse, an option is invalid, or a decision is missing: the
// scope ([WithScope] or [WithSharedScope]) and what becomes of poison
// ([WithDeadLetter] or [WithDiscardPoison]). No error, and no log line,
// shows the URL's password.
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
	c := &Consumer{g: g, url: url, queue: queue, handler: h}
	c.shown, c.secrets = redact(url)
	if _, err := amqp.ParseURI(url); err != nil {
		// Not wrapped: url.Parse's error quotes the URL, or a part of it.
		return nil, fmt.Errorf("idemamqp: New: the URL %s: %s", c.shown, c.scrub(errors.New(parseError(err))))
	}
	c.o.defaults()
	if err := chassis.Build(&c.o, &c.o.Options, broker, g, idem.Config{}, opts); err != nil {
		return nil, err
	}
	if err := c.o.check(queue); err != nil {
		return nil, err
	}
	c.tries = chassis.NewTries(maxTries)
	c.ahead = ahead.For(g)
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
//     subscribes. When the connection or the consuming channel drops, or
//     the broker cancels the subscription, it connects again, with a
//     backoff ([WithReconnectBackoff]), until ctx ends. Handlers running
//     when the connection dropped run to the end and store their outcome;
//     the broker delivers their unacknowledged deliveries again, and those
//     are then acked as duplicates.
//   - When ctx ends it takes no new delivery, lets running handlers finish
//     for the drain timeout ([WithDrainTimeout]), then cancels their
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
	r.startOutcomes()
	// Each session has a claimer and concurrency workers (see serve); the
	// slots bound the handlers running at once across sessions, since the
	// handlers of a dropped connection run on.
	var workers sync.WaitGroup

	var last *session
	pause := c.o.reconnectMin
	log := c.o.Logger()
	for {
		s, err := r.connect(ctx)
		if err == nil {
			pause = c.o.reconnectMin
			r.observe(ctx, Event{Kind: EventConnected, Queue: c.queue})
			log.InfoContext(ctx, "idemamqp: consuming", slog.String("queue", c.queue), slog.String("url", c.shown))
			workers.Go(func() { r.serve(s) })
			err = c.scrub(s.watch(ctx))
			if ctx.Err() != nil {
				last = s
				break
			}
			s.close()
			r.observe(ctx, Event{Kind: EventDisconnected, Queue: c.queue, Err: err})
			log.WarnContext(ctx, "idemamqp: disconnected; reconnecting", slog.String("queue", c.queue),
				slog.String("url", c.shown), slog.Any("error", err))
		} else if ctx.Err() != nil {
			break
		} else {
			log.WarnContext(ctx, "idemamqp: cannot connect; retrying", slog.String("queue", c.queue),
				slog.String("url", c.shown), slog.Duration("pause", pause), slog.Any("error", c.scrub(err)))
		}
		if sleep(ctx, pause/2+rand.N(pause/2+1)) != nil {
			break
		}
		pause = min(2*pause, c.o.reconnectMax)
	}

	r.drain(cancelHandlers)
	r.out.close() // stores the values of the handlers that ran, and acks their deliveries
	if last != nil {
		last.close() // ends its deliveries, and so its workers
	}
	workers.Wait()
	return nil
}

// serve consumes s: its claimer (claimAhead) takes the deliveries from
// amqp091 and claims them ahead, and concurrency workers handle them, as
// many as a bare consumer's goroutines. It returns once the delivery
// channel closed and the workers took what the claimer handed them; the
// keys of deliveries left by workers that ended (runtime.Goexit) are
// given back.
func (r *runner) serve(s *session) {
	s.ready = make(chan job, r.c.o.prefetch)
	var wg sync.WaitGroup
	wg.Go(func() { r.claimAhead(s) })
	for range r.c.o.concurrency {
		wg.Go(func() { r.work(s) })
	}
	wg.Wait()
	for j := range s.ready {
		j.giveBack()
	}
}

// work handles the deliveries of s until the claimer closes s.ready. Once
// Run is stopping it takes them without handling them, giving back the
// keys claimed for them: the broker requeues them when the connection
// closes.
func (r *runner) work(s *session) {
	for j := range s.ready {
		select {
		case r.slots <- struct{}{}:
		case <-r.stopping:
			j.giveBack()
			continue
		}
		r.handleInSlot(j)
	}
}

// handleInSlot handles j unless Run is stopping, and gives its slot back
// even if the handler ends its goroutine (runtime.Goexit).
func (r *runner) handleInSlot(j job) {
	defer func() { <-r.slots }()
	select {
	case <-r.stopping:
		j.giveBack()
	default:
		r.handle(j)
	}
}

// errDrained cancels the handlers still running when the drain timeout
// passes.
var errDrained = errors.New("idemamqp: the consumer stopped and its drain timeout passed")

// drain waits until no handler runs (it holds every slot, so none can
// start); past the drain timeout it cancels the handlers' contexts and
// waits for them to return.
func (r *runner) drain(cancel context.CancelCauseFunc) {
	timeout := r.c.o.DrainTimeout()
	t := time.NewTimer(timeout)
	defer t.Stop()
	for held := 0; held < cap(r.slots); {
		select {
		case r.slots <- struct{}{}:
			held++
		case <-t.C:
			r.c.o.Logger().Warn("idemamqp: drain timeout passed; cancelling the running handlers",
				slog.String("queue", r.c.queue), slog.Duration("timeout", timeout))
			cancel(errDrained)
		}
	}
}

// runner is one Run of a Consumer.
type runner struct {
	c        *Consumer
	hctx     context.Context // the handlers' context: Run's values, cancelled after the drain timeout
	stopping <-chan struct{} // closed when Run's context ends
	slots    chan struct{}   // one per handler running, at most the concurrency
	out      *outcomes       // stores the values of the handlers that ran, and settles their deliveries
}

// job is one delivery a worker handles, with the session it came from and
// what the claimer learnt of it.
type job struct {
	s       *session
	d       amqp.Delivery
	start   time.Time // when the claimer took it
	key     string
	keyErr  error
	scope   string
	payload []byte // what is fingerprinted, for a delivery with a usable key
	claimed bool   // the claimer claimed its key: cl is the answer
	cl      ahead.Claim
}

// delivery is what the consumer learnt of a delivery before it settles it.
type delivery struct {
	job
	ev    Event
	key   string // its usable key, or ""
	keyOK bool   // key is a usable key
	id    string // its identity for the count of its handler's failures
}

// maxTries bounds the identities whose failures a Consumer counts at once:
// far more than the deliveries a consumer holds or has requeued.
const maxTries = 1 << 14

func (r *runner) handle(j job) {
	o := &r.c.o
	d := j.d
	dl := delivery{job: j, ev: Event{Queue: r.c.queue, DeliveryTag: d.DeliveryTag, Redelivered: d.Redelivered}}
	if j.s.isDead() {
		// Taken before the channel closed: the broker delivers it again.
		j.giveBack()
		r.settled(dl, EventUnsettled, errChannelClosed)
		return
	}
	key, keyErr := j.key, j.keyErr
	dl.key, dl.keyOK = key, keyErr == nil && key != ""
	dl.ev.Key, dl.ev.Scope = key, j.scope
	dl.id = identity(dl.ev.Scope, key, d)
	trace := chassis.Trace(func(name string) string { return traceHeader(d, name) })
	var v chassis.Verdict
	switch {
	case keyErr != nil, key == "" && !o.UnkeyedUnguarded():
		v = o.DecideKey(keyErr)
	case key == "":
		err := r.call(r.hctx, trace, d)
		v = o.Decide(idem.Result{}, err, r.c.tries.Count(dl.id))
	default:
		var pending bool
		v, dl.ev.Replayed, pending = r.guarded(dl, trace)
		if pending {
			return // the outcome writer stores its value and settles it
		}
	}
	r.finish(dl, v)
}

// finish counts a failed handler's failure and carries out the verdict v
// on the delivery dl.
func (r *runner) finish(dl delivery, v chassis.Verdict) {
	if v.Failed {
		r.c.tries.Failed(dl.id)
	}
	r.settle(dl, v)
}

// identity returns what the failures of a delivery's handler are counted
// by. RabbitMQ keeps no count that fits: a classic queue has none (only
// Redelivered, a flag), a quorum queue's x-delivery-count also counts the
// redeliveries of a dropped connection, and a requeued message comes back
// under another delivery tag. So the consumer counts, in memory, by what
// names the message across its deliveries: its scope and key, as the Guard
// names its operation (a duplicate fails with it); for a delivery run
// unguarded, which has no key, its message-id, or else its body's hash.
func identity(scope, key string, d amqp.Delivery) string {
	switch {
	case key != "":
		return "key\x00" + scope + "\x00" + key
	case d.MessageId != "":
		return "message-id\x00" + d.MessageId
	}
	sum := sha256.Sum256(d.Body)
	return "body\x00" + hex.EncodeToString(sum[:])
}

// guarded runs the handler under the Guard and decides the settlement. A
// delivery claimed ahead runs on its claim, and a handler that returned
// leaves its value to the outcome writer (pending: the delivery is the
// writer's to settle); one answered by its claim is decided at once. The
// others, and those whose lease was lost while they waited, go through
// DoScoped. A claim the store could not answer is tried again, with a
// backoff, while the delivery is held: the broker's redelivery count is
// not spent on a store outage. It reports whether the outcome was
// replayed.
func (r *runner) guarded(dl delivery, trace consumer.TraceCarrier) (v chassis.Verdict, replayed, pending bool) {
	o := &r.c.o
	var ran bool
	fn := func(ctx context.Context) ([]byte, error) {
		ran = true
		return nil, r.call(ctx, trace, dl.d)
	}
	switch cl := dl.cl; {
	case cl.Held != nil:
		_, err, ok := cl.Held.Run(fn)
		if ok && err == nil {
			r.out.add(dl, cl.Held)
			return v, false, true
		}
		if ok {
			return o.Decide(idem.Result{}, err, r.c.tries.Count(dl.id)), false, false
		}
	case dl.claimed && !cl.Later && !errors.Is(cl.Err, idem.ErrStoreUnavailable):
		res := idem.Result{Value: cl.Value, Replayed: cl.Replayed}
		return o.Decide(res, cl.Err, r.c.tries.Count(dl.id)), cl.Err == nil && cl.Replayed, false
	}
	pause := 50 * time.Millisecond
	for {
		res, err := r.c.g.DoScoped(r.hctx, dl.ev.Scope, dl.key, dl.payload, fn)
		if ran || !errors.Is(err, idem.ErrStoreUnavailable) {
			return o.Decide(res, err, r.c.tries.Count(dl.id)), err == nil && res.Replayed, false
		}
		o.Logger().Warn("idemamqp: the store cannot claim the key; holding the delivery and trying again",
			slog.String("queue", r.c.queue), slog.String("scope", dl.ev.Scope), slog.String("key", dl.key),
			slog.Duration("pause", pause), slog.Any("error", err))
		if !r.wait(dl.s, pause) {
			return o.Decide(res, err, 0), false, false
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// call runs the handler on a copy of d that cannot settle itself; a panic
// is a *consumer.PanicError, logged.
func (r *runner) call(ctx context.Context, trace consumer.TraceCarrier, d amqp.Delivery) error {
	d.Acknowledger = nil
	return r.c.o.Call(ctx, nil, trace, func(ctx context.Context) error { return r.c.handler(ctx, d) }, func() []slog.Attr {
		return []slog.Attr{slog.String("queue", r.c.queue), slog.Uint64("delivery_tag", d.DeliveryTag)}
	})
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

// settle carries out the verdict v on the delivery dl.
func (r *runner) settle(dl delivery, v chassis.Verdict) {
	o := &r.c.o
	s, tag := dl.s, dl.d.DeliveryTag
	switch v.Settle {
	case chassis.Ack:
		r.c.tries.Forget(dl.id)
		r.settled(dl, EventAcked, s.ch.Ack(tag, false))
		return
	case chassis.DeadLetter:
		dl.ev.Reason, dl.ev.Err = v.Reason, v.Cause
		r.poison(dl, v)
		return
	}
	delay := v.Delay
	if v.Busy {
		dl.ev.Delay = o.BusyDelay()
		if *o.delayQueue != "" && r.delay(dl) {
			return
		}
	}
	dl.ev.Err = v.Cause
	r.requeue(dl, delay)
}

// requeue holds the delivery for delay, then nacks it with requeue; at
// once if the consumer stops.
func (r *runner) requeue(dl delivery, delay time.Duration) {
	held := time.Now()
	if !r.wait(dl.s, delay) && dl.s.isDead() {
		r.settled(dl, EventUnsettled, errChannelClosed)
		return
	}
	dl.ev.Delay = time.Since(held)
	r.settled(dl, EventRequeued, dl.s.ch.Nack(dl.d.DeliveryTag, false, true))
}

// delay sends a copy of a busy delivery through the delay queue, to come
// back after the busy delay, and acks the delivery. It reports false,
// having done nothing the broker keeps, when the copy would not come back
// under the same key and scope, or the broker did not take it.
func (r *runner) delay(dl delivery) bool {
	o := &r.c.o
	back := returned(dl.d, r.c.queue)
	if !r.sameRecord(back, dl.ev.Scope, dl.ev.Key, dl.payload) {
		o.Logger().Warn("idemamqp: a copy of this delivery would come back with another scope, key or fingerprint "+
			"(they read the user-id, exchange or routing key, which the delay queue does not keep); requeueing it instead",
			slog.String("queue", r.c.queue), slog.String("scope", dl.ev.Scope), slog.String("key", dl.ev.Key))
		return false
	}
	if err := dl.s.publish(r.hctx, "", *o.delayQueue, publishing(dl.d, dl.d.Headers, dl.d.Body)); err != nil {
		o.Logger().Warn("idemamqp: the delay queue did not take a busy delivery; requeueing it instead",
			slog.String("queue", r.c.queue), slog.String("delay_queue", *o.delayQueue), slog.Any("error", err))
		return false
	}
	// If this ack is lost, the broker delivers the original again beside
	// the copy: a duplicate, which the Guard answers.
	r.settled(dl, EventDelayed, dl.s.ch.Ack(dl.d.DeliveryTag, false))
	return true
}

// sameRecord reports whether back, a delivery as it will come back from
// the delay queue, has the delivery's scope, key and payload.
func (r *runner) sameRecord(back amqp.Delivery, scope, key string, payload []byte) bool {
	s, k, p, err := r.c.o.Read(back)
	return err == nil && s == scope && k == key && bytes.Equal(p, payload)
}

// errChannelClosed is the cause of EventUnsettled for a delivery whose
// session ended before it could be settled.
var errChannelClosed = errors.New("idemamqp: the delivery's channel closed; the broker delivers it again")

// settled reports the settlement of kind, or EventUnsettled when err (the
// settling call's error) says it did not reach the broker.
func (r *runner) settled(dl delivery, kind EventKind, err error) {
	dl.s.held.Add(-1)
	dl.s.tags.settled(dl.d.DeliveryTag)
	ev := dl.ev
	ev.Kind = kind
	if err != nil {
		ev.Kind, ev.Err = EventUnsettled, err
		r.c.o.Logger().Debug("idemamqp: a delivery was not settled; the broker delivers it again",
			slog.String("queue", r.c.queue), slog.String("key", ev.Key), slog.Any("error", err))
	}
	ev.Duration = time.Since(dl.start)
	r.observe(r.hctx, ev)
}

func (r *runner) observe(ctx context.Context, e Event) {
	if r.c.o.observer != nil {
		r.c.o.Observe(ctx, func() { r.c.o.observer(ctx, e) })
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
