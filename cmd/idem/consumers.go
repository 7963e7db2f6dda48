package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// ledger is the payment provider: it charges customers and counts the
// charges of every order.
type ledger struct {
	charges []atomic.Int32 // by order
	total   atomic.Int64
}

func newLedger(orders int) *ledger { return &ledger{charges: make([]atomic.Int32, orders)} }

// charge charges the customer of order and returns the receipt.
func (l *ledger) charge(order int) []byte {
	l.charges[order].Add(1)
	return strconv.AppendInt([]byte("ch_"), l.total.Add(1), 10)
}

// crashPoint is where a consumer process dies while handling a delivery.
type crashPoint uint8

const (
	noCrash           crashPoint = iota
	crashBeforeCharge            // received, not charged yet (idem: inside Do, after the claim)
	crashAfterCharge             // charged, not acked yet (idem: after Do stored the outcome)
)

// crashPlan decides where, if anywhere, the consumer handling a delivery
// crashes. The answer depends on the seed, the message and the delivery's
// attempt only, so both runs of a demo meet the same crash points whatever
// the consumers' interleaving.
type crashPlan struct {
	seed uint64
	rate float64
}

func (p crashPlan) at(d *delivery) crashPoint {
	if p.rate == 0 {
		return noCrash
	}
	rng := rand.New(rand.NewPCG(p.seed, streamCrashes|uint64(d.id)<<20|uint64(d.attempt)))
	if rng.Float64() >= p.rate {
		return noCrash
	}
	return crashBeforeCharge + crashPoint(rng.IntN(2))
}

// runStats counts, for one run, what the consumers saw.
type runStats struct {
	crashes   [3]atomic.Int64 // by crashPoint
	takeovers atomic.Int64    // claims that took over a key whose holder crashed
	busy      atomic.Int64    // claims that found the key held by a live lease
}

// process is one incarnation of a consumer process. It dies at crash: its
// goroutine ends on the spot (runtime.Goexit), so nothing after the crash
// point runs: no ack, no nack, no store write. The deferred calls that run
// as the goroutine unwinds, such as Guard.Do's Release of a claim whose fn
// never returned, find the store refusing every call of a dead process
// (processStore), as a killed process's writes never reach the store.
//
// A process runs several calls at once (a Kafka consumer runs one per
// partition), so a crash can land while another of its calls has charged
// and not yet stored its outcome. That is the window between a side effect
// and its outcome, which no store closes for an unfenced effect and which
// the demo does not claim to (FAULTS.md counts it); its crash points are
// before the charge and after the outcome. So the crash is taken to happen
// once such calls stored their outcomes: their Complete still goes through
// (settled).
type process struct {
	dead    atomic.Bool
	stats   *runStats
	charged sync.Map // storage.Token → struct{}: calls that charged, outcome not stored yet
}

// charge charges order on l for the call of ctx, which holds a key of p.
func (p *process) charge(ctx context.Context, l *ledger, order int) []byte {
	if t, ok := idem.TokenFrom(ctx); ok {
		p.charged.Store(t, struct{}{})
	}
	return l.charge(order)
}

// settled reports whether the call holding t charged and may still store
// its outcome, and forgets it.
func (p *process) settled(t storage.Token) bool {
	_, ok := p.charged.LoadAndDelete(t)
	return ok
}

// crash kills the process at point. It does not return.
func (p *process) crash(point crashPoint) {
	p.dead.Store(true)
	p.stats.crashes[point].Add(1)
	runtime.Goexit()
}

// errProcessDead is what processStore answers once its process crashed. No
// one reads it: the process is gone.
var errProcessDead = errors.New("idem: demo: this consumer process crashed")

// processStore is a process's connection to the shared store: every call
// fails once the process is dead, as a killed process's writes never
// happen. The Guard's deferred Release of a crashed call, and its heartbeat,
// are refused: the key stays in progress until its lease ends, as after a
// real crash. It also counts takeovers and busy claims for the report.
type processStore struct {
	store storage.Store
	p     *process
}

var _ storage.Store = processStore{}

// ClaimBatch claims each key with Claim, so that a batch counts and dies
// as its claims do.
func (s processStore) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	return storage.ClaimEach(ctx, s, args)
}

// CompleteBatch completes each key with Complete.
func (s processStore) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	return storage.CompleteEach(ctx, s, cs)
}

// MaxValueSize is the shared store's.
func (s processStore) MaxValueSize() int { return s.store.MaxValueSize() }

func (s processStore) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if s.p.dead.Load() {
		return storage.Claim{}, errProcessDead
	}
	c, err := s.store.Claim(ctx, a)
	switch {
	case err != nil:
	case c.Outcome == storage.Acquired && c.Record.Attempt > 1:
		s.p.stats.takeovers.Add(1)
	case c.Outcome == storage.Busy:
		s.p.stats.busy.Add(1)
	}
	return c, err
}

func (s processStore) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	if settled := s.p.settled(t); s.p.dead.Load() && !settled {
		return errProcessDead
	}
	return s.store.Complete(ctx, key, t, value, retention)
}

func (s processStore) Fail(ctx context.Context, key string, t storage.Token, cause []byte, retention time.Duration) error {
	if s.p.dead.Load() {
		return errProcessDead
	}
	return s.store.Fail(ctx, key, t, cause, retention)
}

func (s processStore) Release(ctx context.Context, key string, t storage.Token) error {
	if s.p.dead.Load() {
		return errProcessDead
	}
	return s.store.Release(ctx, key, t)
}

func (s processStore) Extend(ctx context.Context, key string, t storage.Token, lease time.Duration) error {
	if s.p.dead.Load() {
		return errProcessDead
	}
	return s.store.Extend(ctx, key, t, lease)
}

func (s processStore) Get(ctx context.Context, key string) (storage.Record, error) {
	if s.p.dead.Load() {
		return storage.Record{}, errProcessDead
	}
	return s.store.Get(ctx, key)
}

func (s processStore) Delete(ctx context.Context, key string) error {
	if s.p.dead.Load() {
		return errProcessDead
	}
	return s.store.Delete(ctx, key)
}

// handler handles one delivery in process p: it charges the order (or not),
// then acks or nacks the delivery, unless p crashes at point on the way.
type handler interface {
	handle(ctx context.Context, p *process, d *delivery, point crashPoint)
}

// retryDelay is how long a nacked message waits for its next delivery.
const retryDelay = 50 * time.Millisecond

// naiveHandler charges for every delivery, as a consumer without
// idempotency does.
type naiveHandler struct{ ledger *ledger }

func (h naiveHandler) handle(ctx context.Context, p *process, d *delivery, point crashPoint) {
	if point == crashBeforeCharge {
		p.crash(point)
	}
	h.ledger.charge(d.msg.order)
	if point == crashAfterCharge {
		p.crash(point)
	}
	d.ack()
}

// guardedHandler charges inside Guard.Do, keyed by the order ID: one charge
// per order, whatever the deliveries.
type guardedHandler struct {
	guard  *idem.Guard
	ledger *ledger
}

func (h guardedHandler) handle(ctx context.Context, p *process, d *delivery, point crashPoint) {
	_, err := h.guard.Do(ctx, d.msg.key, d.msg.payload, func(ctx context.Context) ([]byte, error) {
		if point == crashBeforeCharge {
			p.crash(point) // holding the claim: it stays until the lease ends
		}
		if err := ctx.Err(); err != nil {
			return nil, err // the lease is lost: someone else may charge now
		}
		return p.charge(ctx, h.ledger, d.msg.order), nil
	})
	if point != noCrash {
		// After the charge and its stored outcome; or before the charge
		// when this delivery did not run it (a duplicate, or in progress).
		p.crash(point)
	}
	if err != nil {
		// idem.ErrInProgress: another consumer holds the order (or held it
		// and crashed, until its lease ends). Any other error: retry too.
		d.nack(retryDelay)
		return
	}
	d.ack() // charged now, or replayed: the order is paid
}

// consume runs one consumer slot until the stream is drained or ctx ends:
// a process that takes deliveries from b and hands them to the handler
// newHandler makes for it, and, each time that process crashes, a fresh
// one. newHandler also returns what to close once its process is gone.
func consume(ctx context.Context, b *broker, plan crashPlan, stats *runStats, newHandler func(p *process) (handler, func(), error)) error {
	for {
		p := &process{stats: stats}
		h, closeHandler, err := newHandler(p)
		if err != nil {
			return err
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				d, err := b.receive(ctx)
				if err != nil {
					return // drained, or out of time
				}
				h.handle(ctx, p, d, plan.at(d))
			}
		}()
		<-done // the process finished, or crashed
		closeHandler()
		if !p.dead.Load() {
			return nil
		}
	}
}
