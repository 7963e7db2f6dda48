package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgo/idem/storage"
)

// call is one acquired run of fn. It is a single allocation holding
// everything the run needs: fn's token context, the detached context of the
// outcome write and the heartbeat's list links.
type call struct {
	g           *Guard
	scope       string
	key         string
	storeKey    string
	token       storage.Token
	attempt     int // the claim's, in the store's count
	fingerprint []byte
	cancel      context.CancelCauseFunc

	tctx tokenCtx   // fn's parent: the caller's context plus the token
	octx outcomeCtx // the outcome write's context

	// Guarded by g.hb.mu.
	prev, next *call
	queued     bool
	finished   bool
	due        time.Time // next heartbeat
	deadline   time.Time // local lease deadline: cancel fn when passed unconfirmed
}

// run runs fn on the acquired key and stores its outcome. sent is when the
// Claim was sent: the lease is known to last until sent+Lease at least.
func (c *call) run(ctx context.Context, sent time.Time, fn func(context.Context) ([]byte, error)) (Result, error) {
	fnCtx, err := c.hold(ctx, sent)
	if err != nil {
		return Result{}, err
	}
	value, ferr := c.runHeld(ctx, fnCtx, fn)
	c.g.hb.stop(c)
	if ferr != nil {
		return Result{}, c.fnFailed(ctx, ferr)
	}
	return c.complete(ctx, value)
}

// The steps every face of the engine takes with a key it holds: Do's run
// above, DoBatch's and DoBatchIndependent's batches (batch.go) and the
// consumers' claims ahead (ahead.go). hold starts the run, runHeld runs
// fn, then fnFailed stores an error, complete (one key) or completeCalls
// (many) a value; giveBack gives up a key fn has not run for.

// hold readies the run of the key c acquired by a claim sent at sent: fn's
// context, which carries the token and is cancelled when the lease is lost,
// and the heartbeat that keeps the lease. When the heartbeat cannot take
// the key (the Guard is closing), hold releases it and returns the error.
func (c *call) hold(ctx context.Context, sent time.Time) (fnCtx context.Context, err error) {
	c.tctx = tokenCtx{Context: ctx, token: c.token, attempt: c.attempt}
	fnCtx, c.cancel = context.WithCancelCause(&c.tctx)
	if err := c.g.hb.start(c, sent); err != nil {
		c.cancel(err)
		c.release(ctx)
		return nil, err
	}
	return fnCtx, nil
}

// runHeld runs fn under fnCtx, hold's, and returns what fn returned. The
// key stays held and on the heartbeat: the caller stores the outcome. When
// fn panics, runHeld gives the key back, so that a retry may run, and the
// panic goes on.
func (c *call) runHeld(ctx, fnCtx context.Context, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	g := c.g
	var started time.Time
	if g.cfg.Observer != nil {
		started = time.Now()
	}
	panicked := true
	defer func() {
		if panicked {
			c.giveBack(ctx, context.Canceled)
		}
	}()
	value, ferr := fn(fnCtx)
	panicked = false
	c.cancel(context.Canceled)
	if g.cfg.Observer != nil {
		g.observe(ctx, Event{Op: OpRun, Scope: c.scope, Key: c.key, Duration: time.Since(started), Err: ferr})
	}
	return value, ferr
}

// giveBack releases a held key that fn will not run for, or did not finish:
// off the heartbeat, fn's context cancelled with cause, the lease released.
func (c *call) giveBack(ctx context.Context, cause error) {
	c.g.hb.stop(c)
	c.cancel(cause)
	c.release(ctx)
}

// fnFailed stores ferr, the error fn returned, as Do does: a permanent
// error as the key's outcome (Fail), any other by releasing the key; and
// returns what Do returns then. c is off the heartbeat.
func (c *call) fnFailed(ctx context.Context, ferr error) error {
	g := c.g
	if !IsPermanent(ferr) {
		c.release(ctx)
		return ferr
	}
	cause, err := c.fail(ctx, storage.EncodeFailure(ferr), g.cfg.FailedRetention)
	if err != nil {
		return errors.Join(ferr, err)
	}
	if g.cache != nil {
		g.cache.put(c.storeKey, storage.StatusFailed, c.fingerprint, cause, time.Now().Add(g.cfg.FailedRetention))
	}
	return ferr
}

// complete stores value, fn's, as the key's outcome and returns what Do
// returns then. c is off the heartbeat.
func (c *call) complete(ctx context.Context, value []byte) (Result, error) {
	g := c.g
	if g.maxValue > 0 && len(value) > g.maxValue {
		return c.tooLarge(ctx, value, fmt.Errorf("%w: %d bytes, the store keeps %d", ErrValueTooLarge, len(value), g.maxValue))
	}
	err := c.outcome(ctx, OpComplete, func(octx context.Context) error {
		return g.store.Complete(octx, c.storeKey, c.token, value, g.cfg.Retention)
	})
	if errors.Is(err, ErrValueTooLarge) {
		return c.tooLarge(ctx, value, err)
	}
	if err != nil {
		return Result{Value: value}, err
	}
	c.cached(value)
	return Result{Value: value}, nil
}

// cached keeps value, just stored as the key's outcome, in the local cache.
func (c *call) cached(value []byte) {
	if g := c.g; g.cache != nil {
		g.cache.put(c.storeKey, storage.StatusCompleted, c.fingerprint, bytes.Clone(value), time.Now().Add(g.cfg.Retention))
	}
}

// completeCalls stores values[k] as the outcome of calls[k], a held key
// whose fn returned it, in one CompleteBatch under a context detached from
// ctx, and calls done(k, …) with what Do returns for it then: fn's value
// and nil, an error wrapping ErrLeaseLost or ErrStoreUnavailable, or one
// wrapping ErrValueTooLarge for a value the store cannot keep, stored as
// its marker (tooLarge). Every key is off the heartbeat after.
func (g *Guard) completeCalls(ctx context.Context, calls []*call, values [][]byte, done func(k int, r Result, err error)) {
	cs := make([]storage.Completion, 0, len(calls))
	idx := make([]int, 0, len(calls)) // cs[j] completes calls[idx[j]]
	for k, c := range calls {
		if v := values[k]; g.maxValue > 0 && len(v) > g.maxValue {
			g.hb.stop(c)
			r, err := c.tooLarge(ctx, v, fmt.Errorf("%w: %d bytes, the store keeps %d", ErrValueTooLarge, len(v), g.maxValue))
			done(k, r, err)
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
	if len(cs) > 1 && errors.Is(err, ErrRefused) {
		res, err = completeApart(octx, g.store, cs), nil // the others need not share one key's refusal
	}
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
			c.cached(values[k])
			done(k, Result{Value: values[k]}, nil)
		case errors.Is(cerr, ErrValueTooLarge):
			r, err := c.tooLarge(ctx, values[k], fmt.Errorf("idem: %s (key %q): %w", OpComplete, c.key, cerr))
			done(k, r, err)
		case errors.Is(cerr, ErrLeaseLost), errors.Is(cerr, ErrRefused):
			done(k, Result{Value: values[k]}, fmt.Errorf("idem: %s (key %q): %w", OpComplete, c.key, cerr))
		default:
			done(k, Result{Value: values[k]}, fmt.Errorf("%w: %s (key %q): %w", ErrStoreUnavailable, OpComplete, c.key, cerr))
		}
	}
}

// tooLarge stores cause, an error wrapping ErrValueTooLarge, as the key's
// outcome in place of value, which the store cannot keep: fn ran, and a
// duplicate must not run it again because of how its outcome is stored.
// The marker is kept as long as a completed outcome.
func (c *call) tooLarge(ctx context.Context, value []byte, cause error) (Result, error) {
	g := c.g
	g.cfg.Logger.WarnContext(ctx, "idem: outcome too large for the store, stored as ErrValueTooLarge: duplicates will not get the value",
		slog.String("namespace", g.cfg.Namespace), slog.String("scope", c.scope), slog.String("key", c.key), slog.Int("size", len(value)), slog.Any("error", cause))
	g.observe(ctx, Event{Op: OpTooLarge, Scope: c.scope, Key: c.key, Err: cause})
	marker, err := c.fail(ctx, storage.EncodeFailure(cause), g.cfg.Retention)
	if err != nil {
		return Result{Value: value}, errors.Join(cause, err)
	}
	if g.cache != nil {
		g.cache.put(c.storeKey, storage.StatusFailed, c.fingerprint, marker, time.Now().Add(g.cfg.Retention))
	}
	return Result{Value: value}, cause
}

// fail stores cause, an encoded failure, as the key's outcome and returns
// what it stored. A cause the store cannot keep is stored without its
// message (storage.ShortFailure): at once when the store tells its limit, else
// after the store refused it for its size. The key never stays in progress
// for the size of a message.
func (c *call) fail(ctx context.Context, cause []byte, retention time.Duration) ([]byte, error) {
	g := c.g
	if g.maxValue > 0 && len(cause) > g.maxValue {
		cause = storage.ShortFailure(cause)
	}
	for {
		err := c.outcome(ctx, OpFail, func(octx context.Context) error {
			return g.store.Fail(octx, c.storeKey, c.token, cause, retention)
		})
		if !errors.Is(err, ErrValueTooLarge) || len(cause) == 1 {
			return cause, err
		}
		cause = storage.ShortFailure(cause)
	}
}

func (c *call) release(ctx context.Context) {
	_ = c.outcome(ctx, OpRelease, func(octx context.Context) error {
		return c.g.store.Release(octx, c.storeKey, c.token)
	})
}

// outcome runs one outcome write under the detached context and maps its
// error: ErrLeaseLost stays (wrapped), anything else is the store's failure.
func (c *call) outcome(ctx context.Context, op Op, write func(context.Context) error) error {
	g := c.g
	start := time.Now()
	c.octx.reset(ctx, start.Add(g.cfg.StoreTimeout))
	err := write(&c.octx)
	c.octx.stop()
	if g.cfg.Observer != nil {
		g.observe(ctx, Event{Op: op, Scope: c.scope, Key: c.key, Duration: time.Since(start), Err: err})
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrLeaseLost) {
		g.cfg.Logger.WarnContext(ctx, "idem: lease lost before the outcome was stored",
			slog.String("namespace", g.cfg.Namespace), slog.String("scope", c.scope), slog.String("key", c.key), slog.String("op", op.String()))
		return fmt.Errorf("idem: %s (key %q): %w", op, c.key, err)
	}
	if errors.Is(err, ErrValueTooLarge) {
		return fmt.Errorf("idem: %s (key %q): %w", op, c.key, err) // the caller stores less
	}
	if errors.Is(err, ErrRefused) {
		g.cfg.Logger.WarnContext(ctx, "idem: store refused the outcome",
			slog.String("namespace", g.cfg.Namespace), slog.String("scope", c.scope), slog.String("key", c.key), slog.String("op", op.String()), slog.Any("error", err))
		return fmt.Errorf("idem: %s (key %q): %w", op, c.key, err)
	}
	g.cfg.Logger.WarnContext(ctx, "idem: store failed to take the outcome",
		slog.String("namespace", g.cfg.Namespace), slog.String("scope", c.scope), slog.String("key", c.key), slog.String("op", op.String()), slog.Any("error", err))
	return fmt.Errorf("%w: %s (key %q): %w", ErrStoreUnavailable, op, c.key, err)
}

// A store refuses a whole batch call for one entry out of its range
// (storage.ErrRefused). claimApart and completeApart then ask for each entry
// alone, so that the refusal is that entry's answer and the others go on.

// claimApart claims each of args alone and answers as ClaimBatch would, an
// error in the entry's Err.
func claimApart(ctx context.Context, s storage.Store, args []storage.ClaimArgs) []storage.Claim {
	cls := make([]storage.Claim, len(args))
	for k, a := range args {
		cl, err := s.Claim(ctx, a)
		if err != nil {
			cl = storage.Claim{Err: err}
		}
		cls[k] = cl
	}
	return cls
}

// completeApart completes each of cs alone and answers as CompleteBatch
// would.
func completeApart(ctx context.Context, s storage.Store, cs []storage.Completion) []error {
	errs := make([]error, len(cs))
	for k, c := range cs {
		errs[k] = s.Complete(ctx, c.Key, c.Token, c.Value, c.Retention)
	}
	return errs
}
