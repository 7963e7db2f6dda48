package coalesce

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem/storage"
)

// MaxBatch is the most calls a store wrapped by [New] receives in one
// ClaimBatch or CompleteBatch; the calls queued beyond it go in the batches
// that follow.
const MaxBatch = 128

// releaseTimeout bounds the Release of a claim a batch acquired for a
// caller that had given up.
const releaseTimeout = 5 * time.Second

// New returns a Store that sends the Claim calls made concurrently on it,
// from any number of goroutines, to s as one [storage.Store.ClaimBatch],
// and concurrent Complete calls as one [storage.Store.CompleteBatch]: group
// commit. A call made while no call of its kind is in flight goes to s at
// once, as s's own Claim or Complete, on the caller's goroutine: there is no
// timer, and no latency is added when the store is idle. Calls made while
// one is in flight are queued and sent together, up to [MaxBatch], as soon
// as it returns, by a goroutine that runs while there is a queue.
//
// Use it where many Do calls run at once over a remote store: a consumer
// with many handler goroutines, an HTTP server. It buys fewer round trips
// and less CPU per call, in the store's server and in its client: a Redis
// store runs a batch as one script, a PostgreSQL store as one statement.
// It costs a mutex on every call and, for a call made under load, a
// handoff to the batch's goroutine, a copy of the claim's key and
// fingerprint, and a wait for the call in flight: no call gets faster, so
// where throughput is bound by each call's latency rather than by CPU
// (handlers that wait on I/O, cores to spare) it buys little or nothing.
// Over a local store such as memstore, or where calls seldom overlap, it
// buys nothing. A store whose batch calls are [storage.ClaimEach] and
// [storage.CompleteEach] gains nothing either.
//
// Each call keeps the semantics of s's own: the same answers, in the same
// order for one key (a batch holds the queued calls in their order, and
// ClaimBatch claims two entries for the same key in order). An error of
// one key (ErrKeyReused, ErrLeaseLost) goes to its caller alone, as Claim
// and Complete return it; an error s returns for a batch as a whole (it
// could not be reached) goes to every caller in the batch. A call that a
// batch would refuse as a whole, a claim without a positive lease or
// retention or a value over s's MaxValueSize, goes to s alone.
//
// A caller whose context ends stops waiting and gets the context's error
// at once; its call is not sent if it was still queued. A batch runs under
// a context of its own, which carries none of the callers' values and ends
// when every caller in the batch has given up. A claim that comes back
// Acquired for a caller that gave up is released (Release, bounded by 5
// seconds), so the key is not held until its lease ends. A Complete whose
// caller gave up once it was sent lands or fails as its batch does.
//
// Fail, Release, Extend, Get and Delete go straight to s, and so do
// ClaimBatch, CompleteBatch (their callers batch already) and
// MaxValueSize. Other methods of s (Close, Scan, say) are not passed
// through: call them on s. New of a store it returned returns that store;
// New(nil) is nil.
//
// A panic of s's ClaimBatch or CompleteBatch is caught on the batch's
// goroutine, where nothing else could recover it, and raised again on the
// goroutine of every caller in the batch, as an error that wraps the value
// s panicked with and carries the batch goroutine's stack: each caller's
// recover (net/http's, a consumer's) sees it as it would a panic of s's
// Claim. A claim that such a batch may have acquired ends with its lease.
//
// A batch's goroutine ends once the queue is empty and the store has
// answered: there is nothing to close.
func New(s storage.Store, opts ...Option) storage.Store {
	if _, ok := s.(interface{ coalesces() }); ok || s == nil {
		return s
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	c := &coalesced{Store: s, limit: max(0, s.MaxValueSize())}
	c.claims = &pipe[storage.ClaimArgs, storage.Claim]{
		name: "ClaimBatch", one: s.Claim, many: s.ClaimBatch, own: ownArgs, gaveUp: c.release, hook: o.hook,
	}
	c.completes = &pipe[storage.Completion, error]{
		name: "CompleteBatch",
		one: func(ctx context.Context, a storage.Completion) (error, error) {
			return s.Complete(ctx, a.Key, a.Token, a.Value, a.Retention), nil
		},
		many: s.CompleteBatch,
		hook: o.hook,
	}
	return c
}

// Option configures [New].
type Option func(*options)

type options struct {
	hook BatchHook
}

// BatchHook is called as a batch is sent, on the batch's goroutine, with
// the batch's context, the store call's name ("ClaimBatch" or
// "CompleteBatch") and the contexts of the callers in the batch (read
// their values only: they belong to goroutines that wait). It returns the
// context to make the call under and a func that is called with the call's
// error once it returns. Tracing uses it: a span for the batch, linked to
// each caller's span (idemotel's Telemetry.CoalesceHook). A call made at
// once on its caller's goroutine, with no queue, is not a batch: it runs
// under the caller's own context, and the hook is not called.
type BatchHook func(ctx context.Context, call string, callers []context.Context) (context.Context, func(error))

// WithBatchHook calls h around every batch New sends.
func WithBatchHook(h BatchHook) Option { return func(o *options) { o.hook = h } }

// ownArgs returns a with a key and fingerprint of its own, for a queued
// claim: its caller may give up and reuse the bytes while the batch holds
// it.
func ownArgs(a storage.ClaimArgs) storage.ClaimArgs {
	b := make([]byte, len(a.Key)+len(a.Fingerprint))
	n := copy(b, a.Key)
	copy(b[n:], a.Fingerprint)
	a.Key = string(b[:n])
	if a.Fingerprint != nil {
		a.Fingerprint = b[n:len(b):len(b)]
	}
	return a
}

// coalesced is the Store of New: Claim and Complete go through their
// pipes, the rest to the store.
type coalesced struct {
	storage.Store
	claims    *pipe[storage.ClaimArgs, storage.Claim]
	completes *pipe[storage.Completion, error]
	limit     int // the store's MaxValueSize, or 0
}

func (c *coalesced) coalesces() {}

// Claim implements [storage.Store.Claim].
func (c *coalesced) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if a.Lease <= 0 || a.Retention <= 0 {
		return c.Store.Claim(ctx, a)
	}
	cl, err := c.claims.do(ctx, a)
	if err == nil && cl.Err != nil {
		return storage.Claim{}, cl.Err
	}
	return cl, err
}

// Complete implements [storage.Store.Complete].
func (c *coalesced) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	if retention <= 0 || c.limit > 0 && len(value) > c.limit {
		return c.Store.Complete(ctx, key, t, value, retention)
	}
	verdict, err := c.completes.do(ctx, storage.Completion{Key: key, Token: t, Value: value, Retention: retention})
	if err != nil {
		return err
	}
	return verdict
}

// release gives up the claim a batch acquired for a caller that had gone.
func (c *coalesced) release(a storage.ClaimArgs, cl storage.Claim, err error) {
	if err != nil || cl.Err != nil || cl.Outcome != storage.Acquired {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	c.Store.Release(ctx, a.Key, cl.Token) // nothing to tell anyone: the lease ends on its own if this fails
}

// pipe coalesces the calls of one kind: one call at a time on the store,
// either a caller's own (one) when it found the pipe idle, or a batch of
// the queued calls (many) on the pipe's goroutine.
type pipe[A, R any] struct {
	one    func(ctx context.Context, a A) (R, error)
	many   func(ctx context.Context, as []A) ([]R, error)
	own    func(a A) A               // a copy of a that shares no bytes with the caller's; may be nil
	gaveUp func(a A, r R, err error) // the answer of a call whose caller had gone; may be nil
	name   string                    // the batch call's name, for hook
	hook   BatchHook                 // may be nil

	mu    sync.Mutex
	busy  bool            // a call is in flight, or the pipe's goroutine runs
	queue []*waiter[A, R] // calls waiting for the next batch, in arrival order
}

// waiter is one queued call.
type waiter[A, R any] struct {
	ctx   context.Context
	arg   A
	res   R
	err   error
	panic *batchPanic   // the store panicked on the batch: re-raised on the caller's goroutine
	state atomic.Int32  // waiting, then answered (by the pipe) or gone (by the caller)
	done  chan struct{} // closed once answered
}

// batchPanic is a panic of the store's batch call, with the stack of the
// batch's goroutine where it was raised. The batch's callers each panic
// with it on their own goroutines, where a recover of theirs (net/http's,
// a consumer's) catches it as it would a panic of the store's Claim.
type batchPanic struct {
	value any
	stack []byte
}

func (p *batchPanic) Error() string {
	return fmt.Sprintf("idem: coalesce: the store panicked in a batch call: %v\n\n%s", p.value, p.stack)
}

// Unwrap returns the value the store panicked with, when it is an error.
func (p *batchPanic) Unwrap() error { err, _ := p.value.(error); return err }

const (
	waiting int32 = iota
	answered
	gone
)

// do makes the call a: at once when the pipe is idle, else in the next
// batch.
func (p *pipe[A, R]) do(ctx context.Context, a A) (R, error) {
	p.mu.Lock()
	if !p.busy {
		p.busy = true
		p.mu.Unlock()
		defer p.next()
		return p.one(ctx, a)
	}
	var zero R
	if err := ctx.Err(); err != nil {
		p.mu.Unlock()
		return zero, err
	}
	if p.own != nil {
		a = p.own(a)
	}
	w := &waiter[A, R]{ctx: ctx, arg: a, done: make(chan struct{})}
	p.queue = append(p.queue, w)
	p.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		if w.state.CompareAndSwap(waiting, gone) {
			return zero, ctx.Err()
		}
		<-w.done // answered meanwhile: a claim may have been acquired
	}
	if w.panic != nil {
		panic(w.panic)
	}
	if w.err != nil && ctx.Err() != nil {
		return zero, ctx.Err() // the batch may have failed because its callers gave up
	}
	return w.res, w.err
}

// next hands the queue to the pipe's goroutine once a caller's own call
// returned, or marks the pipe idle when there is none.
func (p *pipe[A, R]) next() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		p.busy = false
		return
	}
	go p.run()
}

// run sends the queued calls in batches until the queue is empty.
func (p *pipe[A, R]) run() {
	for {
		p.mu.Lock()
		var batch []*waiter[A, R]
		n := 0
		for ; n < len(p.queue) && len(batch) < MaxBatch; n++ {
			if w := p.queue[n]; w.state.Load() != gone {
				batch = append(batch, w)
			}
		}
		rest := copy(p.queue, p.queue[n:])
		clear(p.queue[rest:])
		p.queue = p.queue[:rest]
		if len(batch) == 0 {
			p.busy = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		p.send(batch)
	}
}

// send sends batch as one call and answers its callers.
func (p *pipe[A, R]) send(batch []*waiter[A, R]) {
	ctx, cancel := batchContext(batch)
	args := make([]A, len(batch))
	for i, w := range batch {
		args[i] = w.arg
	}
	var done func(error)
	if p.hook != nil {
		callers := make([]context.Context, len(batch))
		for i, w := range batch {
			callers[i] = w.ctx
		}
		ctx, done = p.hook(ctx, p.name, callers)
	}
	res, err, panicked := p.call(ctx, args)
	if done != nil {
		if panicked != nil {
			done(panicked)
		} else {
			done(err)
		}
	}
	var errs []error // by caller, where the store refused the batch for one of them
	if panicked == nil && len(batch) > 1 && errors.Is(err, storage.ErrRefused) {
		res, errs = p.apart(ctx, args)
		err = nil
	}
	cancel()
	if err == nil && panicked == nil && len(res) != len(batch) {
		err = fmt.Errorf("idem: coalesce: the store answered %d of a batch of %d", len(res), len(batch))
	}
	var left []*waiter[A, R]
	for i, w := range batch {
		switch {
		case panicked != nil:
			w.panic = panicked
		case err != nil:
			w.err = err
		case errs != nil && errs[i] != nil:
			w.err = errs[i]
		default:
			w.res = res[i]
		}
		if w.state.CompareAndSwap(waiting, answered) {
			close(w.done)
		} else if p.gaveUp != nil && panicked == nil {
			// A batch that panicked tells nothing of what it claimed: a
			// claim of a caller that gave up ends with its lease.
			left = append(left, w)
		}
	}
	for _, w := range left { // rare, and bounded: the next batch may wait for it
		p.gaveUp(w.arg, w.res, w.err)
	}
}

// apart makes one call per argument, after the store refused a batch
// (storage.ErrRefused) for an argument out of its range: the refusal goes
// to that argument's caller alone, and the others get their answers.
func (p *pipe[A, R]) apart(ctx context.Context, args []A) ([]R, []error) {
	res, errs := make([]R, len(args)), make([]error, len(args))
	for i := range args {
		r, err, panicked := p.call(ctx, args[i:i+1])
		switch {
		case panicked != nil:
			errs[i] = panicked
		case err != nil:
			errs[i] = err
		case len(r) != 1:
			errs[i] = fmt.Errorf("idem: coalesce: the store answered %d of a batch of 1", len(r))
		default:
			res[i] = r[0]
		}
	}
	return res, errs
}

// call makes the batch call, catching a panic of the store's: on the
// batch's goroutine nothing would recover it, and the process would end.
func (p *pipe[A, R]) call(ctx context.Context, args []A) (res []R, err error, panicked *batchPanic) {
	defer func() {
		if r := recover(); r != nil {
			panicked = &batchPanic{value: r, stack: debug.Stack()}
		}
	}()
	res, err = p.many(ctx, args)
	return res, err, nil
}

// batchContext returns the context of a batch, which ends once every
// caller in it has given up, and the func that ends it.
func batchContext[A, R any](batch []*waiter[A, R]) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	var live atomic.Int64
	live.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, w := range batch {
		if w.ctx.Done() == nil {
			continue // it never ends, so neither does the batch but by the store's answer
		}
		stops[i] = context.AfterFunc(w.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			if stop != nil {
				stop()
			}
		}
		cancel()
	}
}
