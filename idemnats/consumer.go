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
	var inFlight *inFlightBatch
	defer func() {
		if inFlight != nil {
			inFlight.wait(r)
		}
	}()
	for r.stopping.Err() == nil {
		next, err := r.fetchBatch(prev)
		if inFlight != nil {
			inFlight.wait(r)
		}
		inFlight = next
		if next != nil {
			prev = next.last
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
// arrive: a goroutine per message claims its key at once, and the
// handlers run one after another in the order of the batch, the first
// after prev is closed. It returns once the last message has arrived, with
// the batch in flight (nil when the fetch failed at once), and the fetch's
// error.
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
	for msg := range mb.Messages() {
		d := f.b.add(msg)
		if r.stopping.Err() != nil {
			r.settle(d, "", "", verdict{action: actRetry, cause: errStopping})
			continue
		}
		before, turn := f.last, make(chan struct{})
		f.wg.Go(func() { r.deliver(d, before, turn) })
		f.last = turn
	}
	err = mb.Error()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, jetstream.ErrBatchCompleted) {
		err = nil // the fetch ran its time, or the run is stopping
	}
	return f, err
}

// closedTurn is the turn of the message before a batch's first.
var closedTurn = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// deliver handles one message of a batch. Its handler starts once prev is
// closed, the turn of the message before it; turn is closed once this
// message's turn is over: its handler returned, or the Guard answered
// without running it and the messages before it had their turn.
func (r *run) deliver(d *delivery, prev <-chan struct{}, turn chan struct{}) {
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

	c := r.c
	scope := c.o.Scope(d.msg)
	key, err := c.key(d.msg)
	switch {
	case err != nil:
		r.settle(d, scope, key, verdict{action: actDeadLetter, reason: ReasonInvalidKey, cause: err})
		return
	case key == "" && c.o.unkeyed == DeadLetterUnkeyed:
		r.settle(d, scope, key, verdict{action: actDeadLetter, reason: ReasonMissingKey, cause: ErrNoKey})
		return
	case key == "":
		// RunUnkeyed: the handler runs without idempotency.
		if !waitTurn() {
			r.settle(d, scope, key, verdict{action: actRetry, cause: errStopping})
			return
		}
		err := c.handle(r.work, d.msg)
		pass()
		r.settle(d, scope, key, c.o.verdictOf(idem.Result{}, err))
		return
	}

	payload := d.msg.Data()
	if c.o.fingerprint != nil {
		payload = c.o.fingerprint(d.msg)
	}
	res, err := c.g.DoScoped(r.work, scope, key, payload, func(ctx context.Context) ([]byte, error) {
		if !waitTurn() {
			return nil, errStopping
		}
		if ctx.Err() != nil {
			// The lease was lost while the message waited its turn.
			return nil, context.Cause(ctx)
		}
		err := c.handle(ctx, d.msg)
		pass()
		return nil, err
	})
	if errors.Is(err, idem.ErrClosed) {
		r.stop(fmt.Errorf("idemnats: %w", idem.ErrClosed))
	}
	v := c.o.verdictOf(res, err)
	if v.action == actAck {
		d.replayed = res.Replayed
	}
	r.settle(d, scope, key, v)
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
