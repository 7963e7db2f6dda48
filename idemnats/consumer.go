package idemnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/adapter"
)

// Handler handles one message. Its context carries the lease token
// ([idem.TokenFrom]) and is cancelled when the lease is lost or the
// shutdown timeout passes. It returns nil when the message's work is done:
// the outcome is stored and the message acked. An error marked with
// [idem.Permanent] is stored as the key's outcome, and the message
// dead-lettered and terminated. Any other error (or a panic) releases the
// key, and the message is redelivered after the retry delay. The handler
// must not ack, nak or terminate msg itself.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// Consumer handles the messages of a JetStream pull consumer through an
// [idem.Guard]: each message's handler runs at most once to completion per
// key, whatever JetStream redelivers. Create one with [New] and call
// [Consumer.Run].
type Consumer struct {
	g    *idem.Guard
	cons jetstream.Consumer
	h    Handler
	o    options
}

// New returns a Consumer that handles the messages of cons with h, through
// g. cons must be a pull consumer with AckPolicy explicit: acks are per
// message, and nothing is acked before its outcome is stored. New fails
// when g, cons or h is nil, an option is invalid, the consumer's cached
// configuration has another AckPolicy, or no scope decision was made:
// pass [WithScope] or [WithSharedScope].
func New(g *idem.Guard, cons jetstream.Consumer, h Handler, opts ...Option) (*Consumer, error) {
	switch {
	case g == nil:
		return nil, errors.New("idemnats: New: Guard is nil")
	case cons == nil:
		return nil, errors.New("idemnats: New: Consumer is nil")
	case h == nil:
		return nil, errors.New("idemnats: New: Handler is nil")
	}
	c := &Consumer{g: g, cons: cons, h: h}
	c.o.defaults()
	names := adapter.Names{Pkg: "idemnats", Request: "jetstream.Msg", Key: "the " + DefaultKeyHeader + " header"}
	if err := adapter.Build(&c.o, &c.o.Policy, names, g, opts); err != nil {
		if !c.o.scoped {
			err = fmt.Errorf("%w. For a consumer, keys are chosen by publishers: without a scope, a publisher "+
				"that sends another tenant's key makes this consumer ack that tenant's message as a duplicate "+
				"without handling it", err)
		}
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
// Run's context ended: the key is released and the message handed back.
var errStopping = errors.New("idemnats: consumer stopping")

// Run fetches and handles messages until ctx ends, then stops cleanly: it
// fetches no more, hands back (Nak) the fetched messages whose handler has
// not started, releasing the keys claimed for them, lets the running
// handlers finish within the shutdown timeout ([WithShutdownTimeout]) and
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
	r.progress.init(ackWait/3, c.o.observer, c.o.Logger())

	var bg sync.WaitGroup
	bg.Go(func() { r.progress.loop(work) })
	// The handlers' context ends a shutdown timeout after stopping does.
	bg.Go(func() {
		select {
		case <-stopping.Done():
		case <-work.Done():
			return
		}
		t := time.NewTimer(c.o.shutdownTimeout)
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
	// work is the handlers' and the store's context: it ends the shutdown
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

// maxInFlight is how many batches a fetch loop holds: the one whose
// handlers run, and the next, fetched and claimed meanwhile.
const maxInFlight = 2

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
// claims in one store round trip ([idem.Guard.DoBatchUnordered]) and whose outcomes
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
				r.settle(d, "", "", verdict{action: actRetry, cause: errStopping})
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
	d          *delivery
	scope, key string
	pos        int // its place in the chunk
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
	defer func() {
		select {
		case <-prev:
		case <-r.stopping.Done():
		}
		pass()
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
		scope := c.o.Scope(d.msg)
		key, err := c.key(d.msg)
		switch {
		case err != nil:
			r.settle(d, scope, key, verdict{action: actDeadLetter, reason: ReasonInvalidKey, cause: err})
		case key == "" && c.o.unkeyed == DeadLetterUnkeyed:
			r.settle(d, scope, key, verdict{action: actDeadLetter, reason: ReasonMissingKey, cause: ErrNoKey})
		case key == "":
			// RunUnkeyed: the handler runs without idempotency, in its
			// place among the others.
			r.guard(run, waitTurn, handled)
			run = run[:0]
			if !waitTurn() {
				r.settle(d, scope, key, verdict{action: actRetry, cause: errStopping})
				continue
			}
			err := c.handle(r.work, d.msg)
			handled(pos)
			r.settle(d, scope, key, c.o.verdictOf(idem.Result{}, err))
		default:
			run = append(run, guarded{d: d, scope: scope, key: key, pos: pos})
		}
	}
	r.guard(run, waitTurn, handled)
}

// guard runs the handlers of ms under the Guard, in order, and settles
// their messages. DoBatchUnordered claims their keys in one store round
// trip and stores their outcomes in one, and goes on past a message that
// does not finish (its retryable error, a busy key), which is naked and
// comes back later, after the ones behind it: order holds for the messages
// that succeed at their first try. The batch stops only where no message
// after can run (the store down, the Guard closed, the shutdown timeout
// passed): those are handed back.
func (r *run) guard(ms []guarded, waitTurn func() bool, handled func(pos int)) {
	if len(ms) == 0 {
		return
	}
	c := r.c
	ops := make([]idem.BatchOp, len(ms))
	for i, m := range ms {
		payload := m.d.msg.Data()
		if c.o.fingerprint != nil {
			payload = c.o.fingerprint(m.d.msg)
		}
		ops[i] = idem.BatchOp{Scope: m.scope, Key: m.key, Payload: payload}
	}
	res := c.g.DoBatchUnordered(r.work, ops, func(ctx context.Context, i int) ([]byte, error) {
		if !waitTurn() {
			return nil, errStopping
		}
		if ctx.Err() != nil {
			// The lease was lost while the message waited its turn.
			return nil, context.Cause(ctx)
		}
		err := c.handle(ctx, ms[i].d.msg)
		handled(ms[i].pos)
		return nil, err
	})
	var why error // why the batch stopped
	for i, br := range res {
		m := ms[i]
		v := c.o.verdictOf(br.Result, br.Err)
		switch {
		case errors.Is(br.Err, idem.ErrClosed):
			r.stop(fmt.Errorf("idemnats: %w", idem.ErrClosed))
		case errors.Is(br.Err, idem.ErrNotRun) && r.stopping.Err() != nil:
			v = verdict{action: actRetry, cause: errStopping}
		case errors.Is(br.Err, idem.ErrNotRun):
			v = c.o.verdictOf(idem.Result{}, fmt.Errorf("%w: %w", br.Err, why))
		case v.action == actAck:
			m.d.replayed = br.Replayed
		}
		if br.Err != nil && !errors.Is(br.Err, idem.ErrNotRun) {
			why = br.Err
		}
		r.settle(m.d, m.scope, m.key, v)
	}
}

// handle runs the handler, turning a panic into an error so that the key
// is released and the message redelivered rather than the process killed.
func (c *Consumer) handle(ctx context.Context, msg jetstream.Msg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	return c.h(ctx, msg)
}

// PanicError is the error of a handler that panicked: the key is released
// and the message redelivered, as for any error not marked permanent.
type PanicError struct {
	Value any    // what the handler panicked with
	Stack []byte // the handler goroutine's stack at the panic
}

func (e *PanicError) Error() string { return fmt.Sprintf("idemnats: handler panicked: %v", e.Value) }
