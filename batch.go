package idem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemgo/idem/storage"
)

// BatchOp is one operation of [Guard.DoBatch]: the arguments of one
// [Guard.DoScoped] call.
type BatchOp struct {
	Scope   string
	Key     string
	Payload []byte
}

// BatchResult is the answer to one operation of [Guard.DoBatch]: what
// [Guard.DoScoped] would have returned for it.
type BatchResult struct {
	Result
	Err error
}

// ErrNotRun is the error of the operations of a [Guard.DoBatch] after one
// that did not finish: DoBatch stopped there and left their keys as it
// found them (a claim it had made for them is released). Run them again.
var ErrNotRun = errors.New("idem: not run: an earlier operation of the batch did not finish")

// DoBatch runs the operations ops in order, each as [Guard.DoScoped] would
// run it with fn(ctx, i) as its operation, and returns one result per
// operation. It is for consumers that receive messages in batches: every
// key is claimed in one [storage.Store.ClaimBatch] before the first fn
// runs, and the values are stored in one [storage.Store.CompleteBatch]
// once the last fn returned (or, in a batch of slow operations, every
// 50ms, so that duplicates waiting elsewhere do not wait for the whole
// batch).
//
// The guarantees are Do's, for every operation: fn runs at most once to
// completion per key, under a context that carries the key's token and is
// cancelled if its lease is lost; the heartbeat extends the lease of every
// key DoBatch holds, also while a key waits for its turn or for the batch's
// completion; a permanent error is stored (Fail), any other error or a
// panic releases the key (a panic also releases the keys not run yet,
// stores the values of those that ran, then goes on); a duplicate gets the
// stored outcome with Replayed set; a busy key waits up to Config.Wait.
// Two operations with the same scope and key in one batch are one
// operation: the second gets the first's outcome, replayed. A batch never
// holds a key while it waits for another holder's: before it waits, it
// stores the values it has and gives back the keys it claimed past the
// busy one (claiming them again at their turn), so batches that share keys
// in different orders cannot wait for each other.
//
// DoBatch stops at the first operation that does not finish, so that the
// operations after it do not overtake it: fn returned an error that is not
// permanent, the key is busy (ErrInProgress), the store failed
// (ErrStoreUnavailable), the lease was lost, ctx ended or the Guard was
// closed. That operation's result carries the error, and every later one
// ErrNotRun. Operations finish with a value (fresh or replayed), a
// permanent error (stored or replayed), ErrKeyReused, ErrInvalidKey,
// ErrRefused (the store refuses that key alone: a batch call it refuses
// whole for one key is asked again key by key, so the others go on), or
// ErrValueTooLarge (the operation ran; its value was too large to keep).
// The values are stored after the last fn returned: a store failure then
// is each such result's error (ErrStoreUnavailable, or ErrLeaseLost when
// another holder took the key over), with fn's value in Result.Value, as
// Do returns it; and a process that crashes before the batch's values are
// stored runs their operations again once their leases end, as Do does
// after a crash between fn and its outcome.
func (g *Guard) DoBatch(ctx context.Context, ops []BatchOp, fn func(ctx context.Context, i int) ([]byte, error)) []BatchResult {
	return g.doBatch(ctx, ops, fn, false)
}

// DoBatchIndependent is [Guard.DoBatch] for operations that do not depend on
// each other's order, such as the messages of a queue whose handlers run
// concurrently anyway. It differs past an operation that does not finish
// (fn's retryable error, a busy key, a lost lease): DoBatch stops there and
// releases the keys it claimed for the operations after it, so each of
// those claims counts toward Config.MaxAttempts without fn having run;
// DoBatchIndependent goes on and runs them. A busy key that Config.Wait lets
// it wait for is waited for last, once the other operations' values are
// stored, so that the batch holds no key while it waits. It stops only
// where the operations after could not run either: the store failed
// (ErrStoreUnavailable), ctx ended or the Guard was closed; those get
// ErrNotRun, their keys left as DoBatch leaves them.
func (g *Guard) DoBatchIndependent(ctx context.Context, ops []BatchOp, fn func(ctx context.Context, i int) ([]byte, error)) []BatchResult {
	return g.doBatch(ctx, ops, fn, true)
}

func (g *Guard) doBatch(ctx context.Context, ops []BatchOp, fn func(ctx context.Context, i int) ([]byte, error), unordered bool) []BatchResult {
	res := make([]BatchResult, len(ops))
	var err error
	switch {
	case fn == nil:
		err = errNilFunc
	case g.closed.Load():
		err = ErrClosed
	}
	if err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	b := g.newBatch(ctx, ops, res, unordered)
	b.fn = fn
	b.run()
	return res
}

// newBatch returns the batch of ops, answered in res (one per op), which
// DoBatchIndependent and the claims ahead run with unordered set.
func (g *Guard) newBatch(ctx context.Context, ops []BatchOp, res []BatchResult, unordered bool) *batch {
	return &batch{
		g: g, ctx: ctx, ops: ops, res: res, unordered: unordered,
		state: make([]opState, len(ops)),
		calls: make([]call, len(ops)),
		fnCtx: make([]context.Context, len(ops)),
	}
}

// stopsAll reports whether an operation's error means that no operation
// after it can run: the store failed, ctx ended or the Guard was closed.
// DoBatchIndependent stops there.
func stopsAll(ctx context.Context, err error) bool {
	return err != nil && (errors.Is(err, ErrStoreUnavailable) || errors.Is(err, ErrClosed) || ctx.Err() != nil)
}

// stops reports whether an operation's error leaves it unfinished, so that
// DoBatch goes no further.
func stops(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrStoreUnavailable), errors.Is(err, ErrLeaseLost):
		return true // also when joined to a permanent error whose Fail failed
	}
	return !IsPermanent(err) && !errors.Is(err, ErrKeyReused) && !errors.Is(err, ErrInvalidKey) && !errors.Is(err, ErrValueTooLarge) &&
		!errors.Is(err, ErrRefused) // decided: the store will refuse it again
}

// opState is where an operation of a batch stands.
type opState uint8

const (
	opDecided  opState = iota // its result is final
	opAcquired                // its key is claimed, fn has not run
	opRan                     // fn returned a value, not stored yet
	opWait                    // its key was busy: DoScoped at its turn waits for it
	opFollower                // an earlier operation has its key
)

// batch is one DoBatch over a BatchClaimer.
type batch struct {
	g     *Guard
	ctx   context.Context
	ops   []BatchOp
	fn    func(context.Context, int) ([]byte, error)
	res   []BatchResult
	state []opState
	calls []call            // by operation; the claim's state when acquired
	fnCtx []context.Context // by operation, when acquired
	lead  map[int]int       // follower → the earlier operation with its key

	unordered bool // DoBatchIndependent: go on past an operation that does not finish

	ran     bool      // values wait to be stored
	slow    bool      // the last operation run took the flush time or longer
	flushed time.Time // when values were last stored, or the operations began

	flushTimer *time.Timer // flushDuring's, made at its first use
	flushMu    sync.Mutex  // held by a flush under way
	flushArmed bool        // guarded by flushMu: a flush is wanted when the timer fires
}

// batchFlush is how long a batch keeps the values of operations that ran
// before it stores them, though operations remain: a long batch (slow
// operations) does not hold its keys, which duplicates elsewhere wait for,
// to its end.
const batchFlush = 50 * time.Millisecond

// prepare readies a batch's claim: it checks each operation's key, builds
// its store key and fingerprint, marks an operation whose key an earlier
// one has as its follower, answers those the local cache holds, and
// returns the arguments of the claims of the others: args[k] claims
// ops[idx[k]].
func (b *batch) prepare() (args []storage.ClaimArgs, idx []int) {
	g := b.g
	args = make([]storage.ClaimArgs, 0, len(b.ops))
	idx = make([]int, 0, len(b.ops))
	first := make(map[string]int, len(b.ops))
	fps := make([][sha256.Size]byte, len(b.ops)) // room for the default fingerprints
	var kb [256]byte                             // each op's store key, before it is a string
	for i, op := range b.ops {
		if err := g.cfg.CheckKey(op.Scope, op.Key); err != nil {
			b.res[i].Err = err
			continue
		}
		c := &b.calls[i]
		c.g, c.scope, c.key = g, op.Scope, op.Key
		k := g.appendStoreKey(kb[:0], op.Scope, op.Key)
		c.storeKey = string(k)
		c.fingerprint = g.cfg.Fingerprint(fps[i][:0], op.Payload)
		if j, ok := first[c.storeKey]; ok {
			if b.lead == nil {
				b.lead = make(map[int]int)
			}
			b.lead[i] = j
			b.state[i] = opFollower
			continue
		}
		first[c.storeKey] = i
		a := storage.ClaimArgs{Key: c.storeKey, Fingerprint: c.fingerprint, Lease: g.cfg.Lease, Retention: g.cfg.FailedRetention, MaxAttempts: g.cfg.MaxAttempts}
		if g.cache != nil {
			if r, err, ok := g.fromCache(b.ctx, op.Scope, op.Key, k, c.fingerprint, time.Now()); ok {
				b.res[i] = BatchResult{r, err}
				continue
			}
		}
		args = append(args, a)
		idx = append(idx, i)
	}
	return args, idx
}

// claimAll claims the keys of the batch's operations in one round trip,
// those the local cache or an earlier operation of the batch do not
// answer, and reports whether it sent a claim.
func (b *batch) claimAll() bool {
	args, idx := b.prepare()
	if len(args) == 0 {
		return false
	}
	b.claim(args, idx)
	return true
}

func (b *batch) run() {
	if b.claimAll() {
		b.holdNothingPastStop()
	}

	panicked := true
	defer func() {
		if panicked {
			b.abort()
		}
	}()
	stopped := false
	b.flushed = time.Now()
	for i := range b.ops {
		if stopped {
			b.skip(i)
			continue
		}
		switch b.state[i] {
		case opAcquired:
			if b.ran && (b.slow || time.Since(b.flushed) >= batchFlush) {
				b.complete()
			}
			b.runOne(i)
		case opWait:
			if b.unordered {
				continue // waited for last, below
			}
			b.wait(i)
		}
		stopped = b.state[i] == opDecided && b.stopsAt(i)
	}
	if b.unordered {
		b.complete() // hold no key while waiting for another holder's
		for i, s := range b.state {
			if s != opWait {
				continue
			}
			if stopped {
				b.skip(i)
				continue
			}
			b.wait(i)
			stopped = b.stopsAt(i)
		}
	}
	panicked = false
	b.complete()
	b.follow()
}

// wait runs the operation i, whose key another holder had, through
// DoScoped, which waits for that holder's outcome up to Config.Wait. The
// batch stores the values it has first, so that it holds no key while it
// waits.
func (b *batch) wait(i int) {
	b.complete()
	op := b.ops[i]
	r, err := b.g.DoScoped(b.ctx, op.Scope, op.Key, op.Payload, func(ctx context.Context) ([]byte, error) { return b.fn(ctx, i) })
	b.res[i] = BatchResult{r, err}
	b.state[i] = opDecided
}

// stopsAt reports whether the batch stops at operation i, decided: DoBatch
// at one that did not finish, DoBatchIndependent at one after which none can
// run.
func (b *batch) stopsAt(i int) bool {
	if b.unordered {
		return stopsAll(b.ctx, b.res[i].Err)
	}
	return stops(b.res[i].Err)
}

// claim claims args in one round trip and sets the state of each
// operation from its answer.
func (b *batch) claim(args []storage.ClaimArgs, idx []int) {
	g := b.g
	sent := time.Now()
	cls, err := b.g.store.ClaimBatch(b.ctx, args)
	if len(args) > 1 && errors.Is(err, ErrRefused) {
		cls, err = claimApart(b.ctx, g.store, args), nil // the others need not share one key's refusal
	}
	if err == nil && len(cls) != len(args) {
		err = fmt.Errorf("ClaimBatch answered %d claims for %d keys", len(cls), len(args))
	}
	took := time.Since(sent)
	if err != nil {
		for _, i := range idx {
			c := &b.calls[i]
			g.observe(b.ctx, Event{Op: OpClaim, Scope: c.scope, Key: c.key, Duration: took, Err: err})
			switch {
			case b.ctx.Err() != nil:
				b.res[i].Err = fmt.Errorf("idem: claim: %w", context.Cause(b.ctx))
			case errors.Is(err, ErrRefused): // the store answered: never fail open
				b.res[i].Err = fmt.Errorf("idem: claim (key %q): %w", c.key, err)
			case g.cfg.FailOpen:
				b.state[i] = opWait // DoScoped claims again, and fails open
			default:
				b.res[i].Err = fmt.Errorf("%w: claim: %w", ErrStoreUnavailable, err)
			}
		}
		return
	}
	for k, cl := range cls {
		i := idx[k]
		c := &b.calls[i]
		if g.cfg.Observer != nil {
			g.observe(b.ctx, Event{Op: OpClaim, Scope: c.scope, Key: c.key, Outcome: cl.Outcome, Attempt: cl.Record.Attempt, Duration: took, Err: claimErr(cl, cl.Err)})
		}
		switch {
		case errors.Is(cl.Err, ErrKeyReused):
			b.res[i].Err = fmt.Errorf("%w (key %q)", ErrKeyReused, c.key)
		case errors.Is(cl.Err, ErrRefused):
			b.res[i].Err = fmt.Errorf("idem: claim (key %q): %w", c.key, cl.Err)
		case cl.Err != nil:
			b.res[i].Err = fmt.Errorf("%w: claim: %w", ErrStoreUnavailable, cl.Err)
		case cl.Outcome == storage.Acquired:
			c.token, c.attempt = cl.Token, cl.Record.Attempt
			var err error
			if b.fnCtx[i], err = c.hold(b.ctx, sent); err != nil {
				b.res[i].Err = err
				continue
			}
			b.state[i] = opAcquired
		case cl.Outcome == storage.Duplicate:
			g.cacheRecord(c.storeKey, c.fingerprint, cl.Record)
			b.res[i].Result, b.res[i].Err = replay(cl.Record)
		case cl.Outcome == storage.Busy && g.cfg.Wait > 0:
			b.state[i] = opWait
		case cl.Outcome == storage.Busy:
			b.res[i].Err = fmt.Errorf("%w (key %q, attempt %d)", ErrInProgress, c.key, cl.Record.Attempt)
		default:
			b.res[i].Err = fmt.Errorf("%w: claim answered an unknown outcome %v", ErrStoreUnavailable, cl.Outcome)
		}
	}
}

// holdNothingPastStop releases, right after the claim, the keys claimed
// past the first operation that stops the batch or waits for another
// holder: a batch never holds a key while it waits for one, so that
// batches that claimed the same keys in different orders cannot wait for
// each other. Past a stop they are not run; past a wait they are claimed
// again at their turn.
func (b *batch) holdNothingPastStop() {
	hit, waiting := false, false
	for i, s := range b.state {
		switch {
		case !hit:
			// DoBatchIndependent waits for busy keys last, holding nothing.
			waiting = s == opWait && !b.unordered
			hit = waiting || (s == opDecided && b.stopsAt(i))
		case s == opAcquired && waiting:
			b.calls[i].giveBack(b.ctx, context.Canceled)
			b.state[i] = opWait
		case s == opAcquired:
			b.skip(i)
		}
	}
}

// runOne runs fn for the acquired operation i. A value waits for the
// batch's completion, holding the key; an error is stored or released at
// once.
func (b *batch) runOne(i int) {
	c, ctx := &b.calls[i], b.fnCtx[i]
	b.state[i] = opDecided // unless fn returns a value; a panic finds its key given back
	if ctx.Err() != nil {  // the lease was lost while the key waited, or ctx ended
		c.giveBack(b.ctx, context.Canceled)
		b.res[i].Err = context.Cause(ctx)
		return
	}
	b.flushDuring()
	defer b.stopFlush() // when fn panics: before abort stores values
	began := time.Now()
	value, ferr := c.runHeld(b.ctx, ctx, func(ctx context.Context) ([]byte, error) { return b.fn(ctx, i) })
	b.stopFlush()
	b.slow = time.Since(began) >= batchFlush
	if ferr == nil {
		b.res[i].Value = value
		b.state[i] = opRan // the heartbeat keeps the lease until it is stored
		b.ran = true
		return
	}
	b.g.hb.stop(c)
	b.res[i].Err = c.fnFailed(b.ctx, ferr)
}

// flushDuring arranges for the values waiting to be stored to be stored
// once the batch's flush time has passed, if an operation still runs
// then: a slow or stalled operation does not keep the ones before it
// unstored, which a crash would run again. The batch's state is the
// flush's alone until stopFlush, which waits for a flush under way, has
// returned. One timer serves the whole batch.
func (b *batch) flushDuring() {
	if !b.ran {
		return
	}
	b.flushMu.Lock()
	b.flushArmed = true
	// Read under the lock: a flush of the timer's last firing, which
	// stopFlush let pass before it took the lock, may run once it is
	// released, and write b.flushed.
	d := max(batchFlush-time.Since(b.flushed), 0)
	b.flushMu.Unlock()
	if b.flushTimer == nil {
		b.flushTimer = time.AfterFunc(d, b.flushNow)
	} else {
		b.flushTimer.Reset(d)
	}
}

// flushNow is the flush timer's: it stores the values that ran, unless
// stopFlush came first.
func (b *batch) flushNow() {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	if b.flushArmed {
		b.flushArmed = false
		b.complete()
	}
}

// stopFlush ends what flushDuring arranged: after it, no flush runs until
// the next flushDuring, and one under way has ended. Calling it again does
// nothing.
func (b *batch) stopFlush() {
	if b.flushTimer == nil {
		return
	}
	b.flushTimer.Stop()
	b.flushMu.Lock() // waits for a flush under way
	b.flushArmed = false
	b.flushMu.Unlock()
}

// skip gives up operation i after the batch stopped.
func (b *batch) skip(i int) {
	if b.state[i] == opAcquired {
		b.calls[i].giveBack(b.ctx, ErrNotRun)
	}
	b.state[i] = opDecided
	b.res[i] = BatchResult{Err: ErrNotRun}
}

// abort cleans up after fn panicked: the values of the operations that ran
// are stored, every other key held is released.
func (b *batch) abort() {
	for i, s := range b.state {
		if s == opAcquired {
			b.skip(i)
		}
	}
	b.complete()
}

// complete stores the values of the operations that ran, in one round trip
// where the store has CompleteBatch.
func (b *batch) complete() {
	n := 0
	for _, s := range b.state {
		if s == opRan {
			n++
		}
	}
	if n == 0 {
		return
	}
	calls, values := make([]*call, 0, n), make([][]byte, 0, n)
	idx := make([]int, 0, n) // calls[k] is operation idx[k]'s
	for i, s := range b.state {
		if s == opRan {
			calls, values, idx = append(calls, &b.calls[i]), append(values, b.res[i].Value), append(idx, i)
		}
	}
	b.ran, b.flushed = false, time.Now()
	b.g.completeCalls(b.ctx, calls, values, func(k int, r Result, err error) {
		i := idx[k]
		b.state[i] = opDecided
		b.res[i] = BatchResult{r, err}
	})
}

// follow answers each follower with its leader's outcome, as a duplicate
// would get it from the store.
func (b *batch) follow() {
	for i, j := range b.lead {
		if b.state[i] != opFollower {
			continue // skipped
		}
		b.state[i] = opDecided
		lead := b.res[j]
		switch {
		case !bytes.Equal(b.calls[i].fingerprint, b.calls[j].fingerprint):
			b.res[i].Err = fmt.Errorf("%w (key %q)", ErrKeyReused, b.calls[i].key)
		case lead.Err == nil:
			b.res[i].Result = Result{Value: bytes.Clone(lead.Value), Replayed: true}
		case IsPermanent(lead.Err) && !stops(lead.Err):
			b.res[i].Err = decodeFailure(storage.EncodeFailure(lead.Err))
		default:
			b.res[i].Err = lead.Err
		}
	}
}
