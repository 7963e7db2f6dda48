package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem/internal/ahead"
	"github.com/idemgo/idem/storage"
)

// The Guard's claim, run and finish apart, for the consumers that claim the
// messages in their prefetch buffer before their workers take them
// (internal/ahead). A claim is a batch of DoBatch's: its keys claimed in
// one ClaimBatch, each held key on the heartbeat from its claim on, one
// operation per key. Its held operations then run on the consumer's
// workers, each on its own, in any order, and their values are stored by
// Complete in batches that mix the operations of several claims.

func init() {
	ahead.Register(func(g any) ahead.Claimer { return aheadClaimer{g.(*Guard)} })
}

type aheadClaimer struct{ g *Guard }

func (a aheadClaimer) Claim(ctx context.Context, ops []ahead.Op, claims []ahead.Claim) {
	g := a.g
	if g.closed.Load() {
		for i := range claims {
			claims[i] = ahead.Claim{Err: ErrClosed}
		}
		return
	}
	n := len(ops)
	b := &batch{
		g: g, ctx: ctx, ops: make([]BatchOp, n), res: make([]BatchResult, n), unordered: true,
		state: make([]opState, n),
		calls: make([]call, n),
		fnCtx: make([]context.Context, n),
	}
	for i, op := range ops {
		b.ops[i] = BatchOp(op)
	}
	if args, idx := b.prepare(); len(args) > 0 {
		b.claim(args, idx)
	}
	var held []aheadHeld // made at the first key held
	for i := range claims {
		switch b.state[i] {
		case opAcquired:
			if held == nil {
				held = make([]aheadHeld, n)
			}
			held[i] = aheadHeld{b: b, i: i}
			claims[i] = ahead.Claim{Held: &held[i]}
		case opWait, opFollower:
			claims[i] = ahead.Claim{Later: true}
		default:
			r := b.res[i]
			claims[i] = ahead.Claim{Value: r.Value, Replayed: r.Replayed, Err: r.Err}
		}
	}
}

func (a aheadClaimer) Complete(held []ahead.Held, errs []error) {
	if len(held) == 0 {
		return
	}
	calls := make([]*call, len(held))
	values := make([][]byte, len(held))
	for k, h := range held {
		h := h.(*aheadHeld)
		calls[k], values[k] = &h.b.calls[h.i], h.value
	}
	a.g.completeCalls(held[0].(*aheadHeld).b.ctx, calls, values, errs)
}

// aheadHeld is the operation i of a claim ahead, its key held.
type aheadHeld struct {
	b     *batch
	i     int
	value []byte // what fn returned, to be stored by Complete
}

func (h *aheadHeld) Run(fn func(context.Context) ([]byte, error)) (value []byte, err error, ran bool) {
	b, i := h.b, h.i
	g, c, ctx := b.g, &b.calls[i], b.fnCtx[i]
	if ctx.Err() != nil { // the lease was lost while the message waited, or ctx ended
		h.Release()
		return nil, context.Cause(ctx), false
	}
	var started time.Time
	if g.cfg.Observer != nil {
		started = time.Now()
	}
	panicked := true
	defer func() {
		if panicked {
			h.Release() // then the panic goes on
		}
	}()
	value, ferr := fn(ctx)
	panicked = false
	c.cancel(context.Canceled)
	if g.cfg.Observer != nil {
		g.observe(b.ctx, Event{Op: OpRun, Scope: c.scope, Key: c.key, Duration: time.Since(started), Err: ferr})
	}
	if ferr == nil {
		h.value = value // the heartbeat keeps the lease until Complete stores it
		return value, nil, true
	}
	g.hb.stop(c)
	return nil, c.fnFailed(b.ctx, ferr), true
}

func (h *aheadHeld) Release() {
	c := &h.b.calls[h.i]
	h.b.g.hb.stop(c)
	c.cancel(context.Canceled)
	c.release(h.b.ctx)
}

// completeCalls stores values[k] as the outcome of calls[k], a held key
// whose fn returned it, in one CompleteBatch under a context detached from
// ctx, and sets errs[k] to what Do returns then: nil, an error wrapping
// ErrLeaseLost or ErrStoreUnavailable, or one wrapping ErrValueTooLarge for
// a value the store cannot keep, stored as its marker (tooLarge). Every key
// is off the heartbeat after.
func (g *Guard) completeCalls(ctx context.Context, calls []*call, values [][]byte, errs []error) {
	cs := make([]storage.Completion, 0, len(calls))
	idx := make([]int, 0, len(calls)) // cs[j] completes calls[idx[j]]
	for k, c := range calls {
		if v := values[k]; g.maxValue > 0 && len(v) > g.maxValue {
			g.hb.stop(c)
			_, errs[k] = c.tooLarge(ctx, v, fmt.Errorf("%w: %d bytes, the store keeps %d", ErrValueTooLarge, len(v), g.maxValue))
			continue
		}
		cs = append(cs, storage.Completion{Key: c.storeKey, Token: c.token, Value: values[k], Retention: g.cfg.Retention})
		idx = append(idx, k)
	}
	if len(cs) == 0 {
		return
	}
	start := time.Now()
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.StoreTimeout)
	res, err := g.store.CompleteBatch(octx, cs)
	cancel()
	if err == nil && len(res) != len(cs) {
		err = fmt.Errorf("CompleteBatch answered %d errors for %d keys", len(res), len(cs))
	}
	took := time.Since(start)
	for j, k := range idx {
		c := calls[k]
		cerr := err
		if cerr == nil {
			cerr = res[j]
		}
		g.observe(ctx, Event{Op: OpComplete, Scope: c.scope, Key: c.key, Duration: took, Err: cerr})
		g.hb.stop(c)
		switch {
		case cerr == nil:
			if g.cache != nil {
				g.cache.put(c.storeKey, storage.StatusCompleted, c.fingerprint, bytes.Clone(values[k]), time.Now().Add(g.cfg.Retention))
			}
			errs[k] = nil
		case errors.Is(cerr, ErrValueTooLarge):
			_, errs[k] = c.tooLarge(ctx, values[k], fmt.Errorf("idem: %s (key %q): %w", OpComplete, c.key, cerr))
		case errors.Is(cerr, ErrLeaseLost):
			errs[k] = fmt.Errorf("idem: %s (key %q): %w", OpComplete, c.key, cerr)
		default:
			errs[k] = fmt.Errorf("%w: %s (key %q): %w", ErrStoreUnavailable, OpComplete, c.key, cerr)
		}
	}
}
