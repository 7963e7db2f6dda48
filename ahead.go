package idem

import (
	"context"

	"github.com/idemgo/idem/internal/ahead"
)

// The claims ahead (internal/ahead) are the third face of the batch engine
// (batch.go), for the consumers that claim the messages in their prefetch
// buffer before their workers take them. A claim is a DoBatchIndependent's
// batch claimed and not run: its keys claimed in one ClaimBatch, each held
// key on the heartbeat from its claim on, one operation per key. Its held
// operations then run on the consumer's workers, each on its own, in any
// order, with the steps Do takes (call.go), and their values are stored by
// completeCalls in batches that mix the operations of several claims.

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
	bops := make([]BatchOp, len(ops))
	for i, op := range ops {
		bops[i] = BatchOp(op)
	}
	b := g.newBatch(ctx, bops, make([]BatchResult, len(ops)), true)
	b.claimAll()
	var held []aheadHeld // made at the first key held
	for i := range claims {
		switch b.state[i] {
		case opAcquired:
			if held == nil {
				held = make([]aheadHeld, len(ops))
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
	a.g.completeCalls(held[0].(*aheadHeld).b.ctx, calls, values, func(k int, _ Result, err error) { errs[k] = err })
}

// aheadHeld is the operation i of a claim ahead, its key held.
type aheadHeld struct {
	b     *batch
	i     int
	value []byte // what fn returned, to be stored by Complete
}

func (h *aheadHeld) Run(fn func(context.Context) ([]byte, error)) (value []byte, err error, ran bool) {
	c, ctx := &h.b.calls[h.i], h.b.fnCtx[h.i]
	if ctx.Err() != nil { // the lease was lost while the message waited, or ctx ended
		h.Release()
		return nil, context.Cause(ctx), false
	}
	value, ferr := c.runHeld(h.b.ctx, ctx, fn)
	if ferr == nil {
		h.value = value // the heartbeat keeps the lease until Complete stores it
		return value, nil, true
	}
	c.g.hb.stop(c)
	return nil, c.fnFailed(h.b.ctx, ferr), true
}

func (h *aheadHeld) Release() { h.b.calls[h.i].giveBack(h.b.ctx, context.Canceled) }
