package idemnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/adapter"
	"github.com/idemgo/idem/internal/chassis"
)

// Handler handles one message. Its context carries the lease token
// ([idem.TokenFrom]) and the W3C trace context of the message's headers
// (consumer.TraceFrom), and is cancelled when the lease is lost or the
// drain timeout passes. It returns nil when the message's work is done:
// the outcome is stored and the message acked. An error marked with
// [idem.Permanent] is stored as the key's outcome, and the message is
// poison (see [WithDeadLetter]), with every later duplicate. Any other
// error, or a panic, releases the key, and the message is redelivered
// after the retry backoff, until it failed WithMaxAttempts times. The
// handler must not ack, nak or terminate msg itself.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// Consumer handles the messages of a JetStream pull consumer through an
// [idem.Guard]: each message's handler runs at most once to completion per
// key, whatever JetStream redelivers. Create one with [New] and call
// [Consumer.Run].
type Consumer struct {
	g     *idem.Guard
	cons  jetstream.Consumer
	h     Handler
	o     options
	tries *chassis.Tries // handler failures in a row, by stream and sequence
}

// maxTries bounds the messages whose failures a Consumer counts at once:
// far more than the messages a consumer holds or has naked.
const maxTries = 1 << 14

// broker is what the chassis knows of JetStream's messages.
var broker = chassis.Broker[jetstream.Msg]{
	Names:            adapter.Names{Pkg: "idemnats", Request: "jetstream.Msg", Key: "the " + DefaultKeyHeader + " header"},
	KeyHeader:        DefaultKeyHeader,
	Header:           func(m jetstream.Msg, name string) []string { return m.Headers()[name] },
	Body:             func(m jetstream.Msg) []byte { return m.Data() },
	ValidHeaderName:  validHeaderName,
	DeadLetterOption: "WithDeadLetter(js, subject)",
}

// New returns a Consumer that handles the messages of cons with h, through
// g. cons must be a pull consumer with AckPolicy explicit: acks are per
// message, and nothing is acked before its outcome is stored. New fails
// when g, cons or h is nil, an option is invalid, the consumer's cached
// configuration has another AckPolicy, or a decision is missing: the
// scope ([WithScope] or [WithSharedScope]) and what becomes of poison
// ([WithDeadLetter] or [WithDiscardPoison]).
func New(g *idem.Guard, cons jetstream.Consumer, h Handler, opts ...Option) (*Consumer, error) {
	switch {
	case g == nil:
		return nil, errors.New("idemnats: New: Guard is nil")
	case cons == nil:
		return nil, errors.New("idemnats: New: Consumer is nil")
	case h == nil:
		return nil, errors.New("idemnats: New: Handler is nil")
	}
	c := &Consumer{g: g, cons: cons, h: h, tries: chassis.NewTries(maxTries)}
	c.o.defaults()
	if err := chassis.Build(&c.o, &c.o.Options, broker, g, idem.Config{}, opts); err != nil {
		return nil, err
	}
	if info := cons.CachedInfo(); info != nil {
		if err := checkConsumer(info); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// checkConsumer refuses a consumer whose acks would not be per message.
func checkConsumer(info *jetstream.ConsumerInfo) error {
	if p := info.Config.AckPolicy; p != jetstream.AckExplicitPolicy {
		return fmt.Errorf("idemnats: consumer %q: AckPolicy %v: must be AckExplicit, so that each message is acked "+
			"only once its outcome is stored", info.Name, p)
	}
	return nil
}

// ErrConsumerDeleted is what Run returns when the JetStream consumer was
// deleted under it.
var ErrConsumerDeleted = errors.New("idemnats: the JetStream consumer was deleted")

// errStopping is the handler's error for a message whose turn came after
// Run's context ended: the key is released and the message handed back. A
// shutdown is no attempt: it wraps context.Canceled, which the chassis
// does not count.
var errStopping = fmt.Errorf("idemnats: consumer stopping: %w", context.Canceled)

// Run fetches and handles messages until ctx ends, then stops cleanly: it
// fetches no more, hands back (Nak) the fetched messages whose handler has
// not started, releasing the keys claimed for them, lets the running
// handlers finish within the drain timeout ([WithDrainTimeout]) and
// settles their messages, and returns nil once every goroutine it started
// has ended. Fetch errors (the server restarting, the connection down) are
// logged and retried with backoff; nats.go reconnects underneath. Run
// returns an error when the consumer's configuration cannot be read or is
// refused, the consumer was deleted ([ErrConsumerDeleted]), or the Guard
// was closed ([idem.ErrClosed]). Several Runs of one Consumer may run at
// once.
func (c *Consumer) Run(ctx context.Context) error {
	info := c.cons.CachedInfo()
	if info == nil {
		var err error
		if info, err = c.cons.Info(ctx); err != nil {
			return fmt.Errorf("idemnats: reading the consumer's configuration: %w", err)
		}
	}
	if err := checkConsumer(info); err != nil {
		return err
	}
	ackWait := info.Config.AckWait
	if ackWait <= 0 {
		ackWait = 30 * time.Second // the server's default
	}

	stopping, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	work, endWork := context.WithCancel(context.WithoutCancel(ctx))
	defer endWork()
	r := &run{c: c, stopping: stopping, stop: stop, work: work}
	var observe func(context.Context, Event)
	if c.o.observer != nil {
		observe = c.observe
	}
	r.progress.init(ackWait/3, observe, c.o.Logger())

	var bg sync.WaitGroup
	bg.Go(func() { r.progress.loop(work) })
	// The handlers' context ends a drain timeout after stopping does.
	bg.Go(func() {
		select {
		case <-stopping.Done():
		case <-work.Done():
			return
		}
		t := time.NewTimer(c.o.DrainTimeout())
		defer t.Stop()
		select {
		case <-t.C:
			endWork()
		case <-work.Done():
		}
	})

	var wg sync.WaitGroup
	for range c.o.concurrency {
		wg.Go(r.fetchLoop)
	}
	wg.Wait()
	endWork()
	bg.Wait()
	if err := context.Cause(stopping); err != nil && ctx.Err() == nil {
		return err // a fatal error stopped the run, not ctx
	}
	return nil
}

// run is one Run's state.
type run struct {
	c *Consumer
	// stopping ends when Run's context does or a fetch loop hits a fatal
	// error: no more fetches, no more handlers started.
	stopping context.Context
	stop     context.CancelCauseFunc
	// work is the handlers' and the store's context: it ends the drain
	// timeout after stopping.
	work     context.Context
	progress progress
	// lastExpiry is when the latest pull request sent expires on the
	// server, in Unix nanoseconds.
	lastExpiry atomic.Int64
}

// fetchLoop fetches batches and handles them until the run stops. It
// fetches the next batch as soon as the last message of the current one
// has arrived, so that the next batch's fetch and claims overlap the
// current batch's handlers and outcome writes; its handlers run after the
// current batch's, in stream order. At most two batches are in flight: a
// batch is settled before the one after the next is fetched.
func (r *run) fetchLoop() {
	backoff := minBackoff
	prev := closedTurn
	var inFlight []*inFlightBatch
	defer func() {
		for _, f := range inFlight {
			f.wait(r)
		}
	}()
	for r.stopping.Err() == nil {
		next, err := r.fetchBatch(prev)
		if next != nil {
			inFlight = append(inFlight, next)
			prev = next.last
		}
		for len(inFlight) >= maxInFlight {
			inFlight[0].wait(r)
			inFlight[0] = nil
			inFlight = inFlight[1:]
		}
		switch {
		case err == nil:
			backoff = minBackoff
			continue
		case r.stopping.Err() != nil:
			return
		case errors.Is(err, jetstream.ErrConsumerDeleted):
			r.stop(fmt.Errorf("%w: %w", ErrConsumerDeleted, err))
			return
		}
		r.c.o.Logger().Warn("idemnats: fetch failed, retrying", slog.Duration("backoff", backoff), slog.Any("error", err))
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-r.stopping.Done():
		}
		t.Stop()
		backoff = min(2*backoff, maxBackoff)
	}
}

// maxInFlight is how many batches a fetch loop holds: one whose outcomes
// are being stored and its messages acked, the one whose handlers run, and
// the next, fetched and claimed meanwhile. With two, the claim of the next
// batch waits behind the store round trip that settles the last one, and
// a fast handler's consumer falls well behind a bare one; with three, the
// round trips overlap the handlers and it comes close.
const maxInFlight = 3

// The backoff of a fetch loop after a failed fetch.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// inFlightBatch is a fetched batch whose messages may not all be settled.
type inFlightBatch struct {
	b    *batch
	wg   sync.WaitGroup // one per message being delivered
	last chan struct{}  // the turn of its last message
}

// wait waits until every message of the batch is settled.
func (f *inFlightBatch) wait(r *run) {
	f.wg.Wait()
	r.progress.untrack(f.b)
}

// fetchBatch fetches one batch and starts handling its messages as they
// arrive: the messages that have arrived when a chunk starts (all of a
// batch the server sends at once) form one chunk, whose keys the Guard
// claims in one store round trip ([idem.Guard.DoBatchIndependent]) and whose outcomes
// it stores in one. The handlers of a chunk run one after another in the
// order of the batch, the first once the chunk before it passed its turn
// (prev for the first chunk). It returns once the last message has
// arrived, with the batch in flight (nil when the fetch failed at once),
// and the fetch's error.
func (r *run) fetchBatch(prev chan struct{}) (*inFlightBatch, error) {
	fctx, cancel := context.WithTimeout(r.stopping, r.c.o.fetchWait)
	defer cancel()
	deadline, _ := fctx.Deadline()
	for old := r.lastExpiry.Load(); deadline.UnixNano() > old && !r.lastExpiry.CompareAndSwap(old, deadline.UnixNano()); {
		old = r.lastExpiry.Load()
	}
	mb, err := r.c.cons.Fetch(r.c.o.batchSize, jetstream.FetchContext(fctx))
	if err != nil {
		return nil, err
	}
	f := &inFlightBatch{b: r.progress.track(), last: prev}
	msgs := mb.Messages()
	for msg := range msgs {
		chunk := []*delivery{f.b.add(msg)}
	gather: // the messages already here join the chunk
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					break gather
				}
				chunk = append(chunk, f.b.add(m))
			default:
				break gather
			}
		}
		if r.stopping.Err() != nil {
			for _, d := range chunk {
				r.settle(d, r.stoppingVerdict())
			}
			continue
		}
		before, turn := f.last, make(chan struct{})
		f.wg.Go(func() { r.deliver(chunk, before, turn) })
		f.last = turn
	}
	err = mb.Error()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, jetstream.ErrBatchCompleted) {
		err = nil // the fetch ran its time, or the run is stopping
	}
	return f, err
}

// closedTurn is the turn of the chunk before a loop's first.
var closedTurn = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// guarded is a message of a chunk whose key goes to the Guard.
type guarded struct {
	d   *delivery
	pos int // its place in the chunk
}

// deliver handles one chunk of a batch. Its first handler starts once
// prev is closed, the turn of the chunk before it; turn is closed once no
// handler of this chunk is left to run: the handler of its last message
// returned, or every message was answered, and the chunks before it had
// their turn.
//
// Runs of keyed messages go to the Guard together (see guard); a message
// without a key that runs unguarded takes its place between them.
func (r *run) deliver(chunk []*delivery, prev <-chan struct{}, turn chan struct{}) {
	var once sync.Once
	pass := func() { once.Do(func() { close(turn) }) }
	// Poison is settled last, once the turn passed: its dead letter may be
	// tried again for a while (see poison), and must hold up neither the
	// other messages' settlements nor the next chunk's handlers.
	type verdict struct {
		d *delivery
		v chassis.Verdict
	}
	var poison []verdict
	settle := func(d *delivery, v chassis.Verdict) {
		if v.Settle == chassis.DeadLetter {
			poison = append(poison, verdict{d, v})
			return
		}
		r.settle(d, v)
	}
	defer func() {
		select {
		case <-prev:
		case <-r.stopping.Done():
		}
		pass()
		for _, p := range poison {
			r.settle(p.d, p.v)
		}
	}()
	// waitTurn waits for prev; false means the run is stopping and the
	// handler must not start.
	waitTurn := func() bool {
		select {
		case <-prev:
		case <-r.stopping.Done():
		}
		return r.stopping.Err() == nil
	}
	// handled runs after the handler of the message at pos returned.
	last := len(chunk) - 1
	handled := func(pos int) {
		if pos == last {
			pass()
		}
	}

	c := r.c
	var run []guarded
	for pos, d := range chunk {
		var key string
		var keyErr error
		d.scope, key, d.payload, keyErr = c.o.Read(d.msg)
		d.key, d.keyOK = key, keyErr == nil && key != ""
		switch {
		case keyErr != nil, key == "" && !c.o.UnkeyedUnguarded():
			settle(d, c.o.DecideKey(keyErr))
		case key == "":
			// WithUnkeyedUnguarded: the handler runs without idempotency,
			// in its place among the others.
			r.guard(run, waitTurn, handled, settle)
			run = run[:0]
			if !waitTurn() {
				settle(d, r.stoppingVerdict())
				continue
			}
			err := c.handle(r.work, d)
			handled(pos)
			settle(d, c.o.Decide(idem.Result{}, err, c.failures(d)))
		default:
			run = append(run, guarded{d: d, pos: pos})
		}
	}
	r.guard(run, waitTurn, handled, settle)
}

// guard runs the handlers of ms under the Guard, in order, and settles
// their messages with settle. DoBatchIndependent claims their keys in one store round
// trip and stores their outcomes in one, and goes on past a message that
// does not finish (its retryable error, a busy key), which is naked and
// comes back later, after the ones behind it: order holds for the messages
// that succeed at their first try. The batch stops only where no message
// after can run (the store down, the Guard closed, the shutdown timeout
// passed): those are handed back.
func (r *run) guard(ms []guarded, waitTurn func() bool, handled func(pos int), settle func(*delivery, chassis.Verdict)) {
	if len(ms) == 0 {
		return
	}
	c := r.c
	ops := make([]idem.BatchOp, len(ms))
	for i, m := range ms {
		ops[i] = idem.BatchOp{Scope: m.d.scope, Key: m.d.key, Payload: m.d.payload}
		m.d.payload = nil
	}
	res := c.g.DoBatchIndependent(r.work, ops, func(ctx context.Context, i int) ([]byte, error) {
		if !waitTurn() {
			return nil, errStopping
		}
		if ctx.Err() != nil {
			// The lease was lost while the message waited its turn.
			return nil, context.Cause(ctx)
		}
		err := c.handle(ctx, ms[i].d)
		handled(ms[i].pos)
		return nil, err
	})
	var why error // why the batch stopped
	for i, br := range res {
		d := ms[i].d
		var v chassis.Verdict
		switch {
		case errors.Is(br.Err, idem.ErrNotRun):
			cause := why
			if cause == nil || r.stopping.Err() != nil {
				cause = errStopping
			}
			v = r.notRun(fmt.Errorf("%w: %w", br.Err, cause), d)
		default:
			if errors.Is(br.Err, idem.ErrClosed) {
				r.stop(fmt.Errorf("idemnats: %w", idem.ErrClosed))
			}
			v = c.o.Decide(br.Result, br.Err, c.failures(d))
		}
		if br.Err != nil && !errors.Is(br.Err, idem.ErrNotRun) {
			why = br.Err
		}
		settle(d, v)
	}
}

// notRun returns the verdict on a message whose handler did not run because
// the batch stopped before it (cause): redelivered after the backoff, and
// no attempt.
func (r *run) notRun(cause error, d *delivery) chassis.Verdict {
	v := chassis.Outage(cause)
	v.Delay = r.c.o.Backoff(r.c.failures(d) + 1)
	return v
}

// failures returns the handler failures counted for d's message. While
// no message has a failure counted, the common case, d's identity (parsed
// from its reply subject) is not worked out.
func (c *Consumer) failures(d *delivery) int {
	if c.tries.Len() == 0 {
		return 0
	}
	return c.tries.Count(d.id())
}

// stoppingVerdict is the verdict on a message handed back as Run stops.
func (r *run) stoppingVerdict() chassis.Verdict {
	return chassis.Outage(errStopping)
}

// handle runs the handler with the message's trace context; a panic is a
// *consumer.PanicError, logged, so that the key is released and the
// message redelivered rather than the process killed.
func (c *Consumer) handle(ctx context.Context, d *delivery) error {
	return c.o.Call(ctx, nil, traceOf(d.msg), func(ctx context.Context) error { return c.h(ctx, d.msg) }, d.attrs)
}

// traceOf returns the trace context among msg's headers. NATS header
// names are case-sensitive, but a W3C header written through an HTTP
// header carrier is canonicalized (Traceparent): either is read.
func traceOf(msg jetstream.Msg) consumer.TraceCarrier {
	h := msg.Headers()
	if len(h) == 0 {
		return nil
	}
	return chassis.Trace(func(name string) string {
		if v := h.Get(name); v != "" {
			return v
		}
		for k, vs := range h {
			if len(vs) > 0 && strings.EqualFold(k, name) {
				return vs[0]
			}
		}
		return ""
	})
}

// attrs returns the log attributes that find d's message in its stream.
func (d *delivery) attrs() []slog.Attr {
	attrs := []slog.Attr{slog.String("subject", d.msg.Subject())}
	if md, err := d.msg.Metadata(); err == nil {
		attrs = append(attrs, slog.String("stream", md.Stream), slog.Uint64("sequence", md.Sequence.Stream),
			slog.Uint64("delivered", md.NumDelivered))
	}
	return append(attrs, slog.String("scope", d.scope), slog.String("key", d.key))
}

// id returns what the failures of d's handler are counted by: its stream
// and sequence, which name the message across its redeliveries.
// JetStream's own count, NumDelivered, does not fit: it counts the Naks
// of a busy key and of a store outage too. The key and scope would count
// the failures of two copies of one key (published apart) together; the
// stream sequence counts each message's own, as MaxAttempts promises, and
// names a message run unguarded, which has no key, as well.
func (d *delivery) id() string {
	if md, err := d.msg.Metadata(); err == nil {
		return md.Stream + "\x00" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	return "\x00key\x00" + d.scope + "\x00" + d.key
}
