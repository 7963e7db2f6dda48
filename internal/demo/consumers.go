package demo

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

// Ledger is the payment provider: it charges customers and counts the
// charges of every order.
type Ledger struct {
	charges []atomic.Int32 // by order
	total   atomic.Int64
}

// NewLedger returns a ledger of orders orders, none charged.
func NewLedger(orders int) *Ledger { return &Ledger{charges: make([]atomic.Int32, orders)} }

// Charge charges the customer of order and returns the receipt.
func (l *Ledger) Charge(order int) []byte {
	l.charges[order].Add(1)
	return strconv.AppendInt([]byte("ch_"), l.total.Add(1), 10)
}

// CrashPoint is where a consumer process dies while handling a delivery.
type CrashPoint uint8

const (
	NoCrash           CrashPoint = iota
	CrashBeforeCharge            // received, not charged yet (idem: inside Do, after the claim)
	CrashAfterCharge             // charged, not acked yet (idem: after Do stored the outcome)
)

// CrashPlan decides where, if anywhere, the consumer handling a delivery
// crashes. The answer depends on the seed, the message's index in the
// stream and the delivery's attempt only, so both runs of a demo meet the same crash points whatever
// the consumers' interleaving.
type CrashPlan struct {
	Seed uint64
	Rate float64
}

// At returns where the consumer handling attempt (1 for the first) of
// the message at index id of the stream crashes.
func (p CrashPlan) At(id, attempt int) CrashPoint {
	if p.Rate == 0 {
		return NoCrash
	}
	rng := rand.New(rand.NewPCG(p.Seed, streamCrashes|uint64(id)<<20|uint64(attempt)))
	if rng.Float64() >= p.Rate {
		return NoCrash
	}
	return CrashBeforeCharge + CrashPoint(rng.IntN(2))
}

// RunStats counts, for one run, what the consumers saw.
type RunStats struct {
	Crashes   [3]atomic.Int64 // by crashPoint
	Takeovers atomic.Int64    // claims that took over a key whose holder crashed
	Busy      atomic.Int64    // claims that found the key held by a live lease
}

// Process is one incarnation of a consumer Process. It dies at crash: its
// goroutine ends on the spot (runtime.Goexit), so nothing after the crash
// point runs: no ack, no nack, no store write. The deferred calls that run
// as the goroutine unwinds, such as Guard.Do's Release of a claim whose fn
// never returned, find the store refusing every call of a dead Process
// (processStore), as a killed Process's writes never reach the store.
//
// A Process runs several calls at once (a Kafka consumer runs one per
// partition), so a crash can land while another of its calls has charged
// and not yet stored its outcome. That is the window between a side effect
// and its outcome, which no store closes for an unfenced effect and which
// the demo does not claim to (FAULTS.md counts it); its crash points are
// before the charge and after the outcome. So the crash is taken to happen
// once such calls stored their outcomes: their Complete still goes through
// (settled).
type Process struct {
	Dead    atomic.Bool
	Stats   *RunStats
	charged sync.Map // storage.Token → struct{}: calls that charged, outcome not stored yet
}

// Charge charges order on l for the call of ctx, which holds a key of p.
func (p *Process) Charge(ctx context.Context, l *Ledger, order int) []byte {
	if t, ok := idem.TokenFrom(ctx); ok {
		p.charged.Store(t, struct{}{})
	}
	return l.Charge(order)
}

// settled reports whether the call holding t charged and may still store
// its outcome, and forgets it.
func (p *Process) settled(t storage.Token) bool {
	_, ok := p.charged.LoadAndDelete(t)
	return ok
}

// Crash kills the process at point. It does not return.
func (p *Process) Crash(point CrashPoint) {
	p.Dead.Store(true)
	p.Stats.Crashes[point].Add(1)
	runtime.Goexit()
}

// ErrProcessDead is what processStore answers once its process crashed. No
// one reads it: the process is gone.
var ErrProcessDead = errors.New("idem: demo: this consumer process crashed")

// ProcessStore is a process's connection to the shared store: every call
// fails once the process is dead, as a killed process's writes never
// happen. The Guard's deferred Release of a crashed call, and its heartbeat,
// are refused: the key stays in progress until its lease ends, as after a
// real crash. It also counts takeovers and busy claims for the report.
type ProcessStore struct {
	Store   storage.Store
	Process *Process
}

var _ storage.Store = ProcessStore{}

// ClaimBatch claims each key with Claim, so that a batch counts and dies
// as its claims do.
func (s ProcessStore) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	return storage.ClaimEach(ctx, s, args)
}

// CompleteBatch completes each key with Complete.
func (s ProcessStore) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	return storage.CompleteEach(ctx, s, cs)
}

// MaxValueSize is the shared store's.
func (s ProcessStore) MaxValueSize() int { return s.Store.MaxValueSize() }

func (s ProcessStore) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if s.Process.Dead.Load() {
		return storage.Claim{}, ErrProcessDead
	}
	c, err := s.Store.Claim(ctx, a)
	switch {
	case err != nil:
	case c.Outcome == storage.Acquired && c.Record.Attempt > 1:
		s.Process.Stats.Takeovers.Add(1)
	case c.Outcome == storage.Busy:
		s.Process.Stats.Busy.Add(1)
	}
	return c, err
}

func (s ProcessStore) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	if settled := s.Process.settled(t); s.Process.Dead.Load() && !settled {
		return ErrProcessDead
	}
	return s.Store.Complete(ctx, key, t, value, retention)
}

func (s ProcessStore) Fail(ctx context.Context, key string, t storage.Token, cause []byte, retention time.Duration) error {
	if s.Process.Dead.Load() {
		return ErrProcessDead
	}
	return s.Store.Fail(ctx, key, t, cause, retention)
}

func (s ProcessStore) Release(ctx context.Context, key string, t storage.Token) error {
	if s.Process.Dead.Load() {
		return ErrProcessDead
	}
	return s.Store.Release(ctx, key, t)
}

func (s ProcessStore) Extend(ctx context.Context, key string, t storage.Token, lease time.Duration) error {
	if s.Process.Dead.Load() {
		return ErrProcessDead
	}
	return s.Store.Extend(ctx, key, t, lease)
}

func (s ProcessStore) Get(ctx context.Context, key string) (storage.Record, error) {
	if s.Process.Dead.Load() {
		return storage.Record{}, ErrProcessDead
	}
	return s.Store.Get(ctx, key)
}

func (s ProcessStore) Delete(ctx context.Context, key string) error {
	if s.Process.Dead.Load() {
		return ErrProcessDead
	}
	return s.Store.Delete(ctx, key)
}

func (s ProcessStore) DeleteIf(ctx context.Context, key string, status storage.Status, t storage.Token) error {
	if s.Process.Dead.Load() {
		return ErrProcessDead
	}
	return s.Store.DeleteIf(ctx, key, status, t)
}

// Handler handles one delivery in process p: it charges the order (or not),
// then acks or nacks the delivery, unless p crashes at point on the way.
type Handler interface {
	handle(ctx context.Context, p *Process, d *delivery, point CrashPoint)
}

// RetryDelay is how long a nacked message waits for its next delivery.
const RetryDelay = 50 * time.Millisecond

// NaiveHandler charges for every delivery, as a consumer without
// idempotency does.
type NaiveHandler struct{ Ledger *Ledger }

func (h NaiveHandler) handle(ctx context.Context, p *Process, d *delivery, point CrashPoint) {
	if point == CrashBeforeCharge {
		p.Crash(point)
	}
	h.Ledger.Charge(d.msg.Order)
	if point == CrashAfterCharge {
		p.Crash(point)
	}
	d.ack()
}

// GuardedHandler charges inside Guard.Do, keyed by the order ID: one charge
// per order, whatever the deliveries.
type GuardedHandler struct {
	Guard  *idem.Guard
	Ledger *Ledger
}

func (h GuardedHandler) handle(ctx context.Context, p *Process, d *delivery, point CrashPoint) {
	_, err := h.Guard.Do(ctx, d.msg.Key, d.msg.Payload, func(ctx context.Context) ([]byte, error) {
		if point == CrashBeforeCharge {
			p.Crash(point) // holding the claim: it stays until the lease ends
		}
		if err := ctx.Err(); err != nil {
			return nil, err // the lease is lost: someone else may charge now
		}
		return p.Charge(ctx, h.Ledger, d.msg.Order), nil
	})
	if point != NoCrash {
		// After the charge and its stored outcome; or before the charge
		// when this delivery did not run it (a duplicate, or in progress).
		p.Crash(point)
	}
	if err != nil {
		// idem.ErrInProgress: another consumer holds the order (or held it
		// and crashed, until its lease ends). Any other error: retry too.
		d.nack(RetryDelay)
		return
	}
	d.ack() // charged now, or replayed: the order is paid
}

// consume runs one consumer slot until the stream is drained or ctx ends:
// a process that takes deliveries from b and hands them to the handler
// newHandler makes for it, and, each time that process crashes, a fresh
// one. newHandler also returns what to close once its process is gone.
func consume(ctx context.Context, b *broker, plan CrashPlan, stats *RunStats, newHandler func(p *Process) (Handler, func(), error)) error {
	for {
		p := &Process{Stats: stats}
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
				h.handle(ctx, p, d, plan.At(d.id, d.attempt))
			}
		}()
		<-done // the process finished, or crashed
		closeHandler()
		if !p.Dead.Load() {
			return nil
		}
	}
}
