// Package txguard is what idem's transactional executors share: pgstore's
// TxGuard over pgx, and the TxGuards over database/sql of pgstore and
// sqlitestore ([SQL]). Each runs an operation whose writes go to the
// database of its records, and commits the claim of the key, the
// operation's writes and its outcome in one transaction.
//
// The executors differ in how they talk to their database (pgx pipelines
// its statements, database/sql runs them one by one) and in the SQL of
// each database; what an executor does with a key, a claim, the
// operation's answer, the Config's observer and logger and the caller's
// cancellation is written once, here ([Exec]), so that the executors
// answer alike. The package is internal: users see the executors'
// documented types in pgstore and sqlitestore, not these pieces.
package txguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// Exec is the part of a transactional executor that does not depend on the
// database: its Config and the package it speaks for.
type Exec struct {
	// Cfg is the executor's idem.Config, defaults filled in
	// (idem.Config.WithDefaults) but for the fields it refuses, which stay
	// zero (see [NewExec]).
	Cfg idem.Config
	// Pkg starts the executor's messages: "pgstore", "sqlitestore".
	Pkg string
	// ClaimLease is the lease of the executor's claims: claimLease
	// (tests shorten it).
	ClaimLease time.Duration
}

// claimLease is the lease of a transactional claim's record. Nobody else
// sees the record in progress: its transaction stores the outcome before
// it commits, and a claim that fails rolls back. The lease only sets the
// record's first expiry, the lease end plus Retention, which an outcome
// stored within the lease keeps (see pgstore's tx_complete): a completed
// record is kept at least Retention after its commit, and at most
// claimLease longer.
const claimLease = idem.DefaultLease

// NewExec checks cfg as an idem.Guard does, and refuses the fields a
// transactional executor cannot honour, each with an error naming it
// (config names the configuration type: "idem.Config", "TxConfig"):
//
//   - Lease: the key is held by the transaction's row lock, not by a
//     lease, from the claim to the commit; a holder that dies frees it as
//     soon as the database ends its transaction.
//   - MaxAttempts: a claim whose operation fails rolls back with it, and
//     leaves nothing to count; a permanent error (idem.Permanent) stops an
//     operation that must not run again.
//   - CacheSize and CacheTTL: there is no cache; a duplicate reads the
//     committed record.
//   - FailOpen: the operation's writes need the database.
//
// The other fields mean what they mean for a Guard.
func NewExec(pkg, config string, cfg idem.Config) (Exec, error) {
	refuse := func(field, why string) (Exec, error) {
		return Exec{}, fmt.Errorf("%s: %s.%s: %s", pkg, config, field, why)
	}
	switch {
	case cfg.Lease != 0:
		return refuse("Lease", "a TxGuard holds its key with its transaction's row lock, not a lease (leave it 0)")
	case cfg.MaxAttempts != 0:
		return refuse("MaxAttempts", "a TxGuard's failed claim rolls back and leaves no attempt to count (leave it 0; return idem.Permanent to stop an operation)")
	case cfg.CacheSize != 0:
		return refuse("CacheSize", "a TxGuard keeps no cache: duplicates read the committed record (leave it 0)")
	case cfg.CacheTTL != 0:
		return refuse("CacheTTL", "a TxGuard keeps no cache (leave it 0)")
	case cfg.FailOpen:
		return refuse("FailOpen", "a TxGuard cannot run without its database")
	}
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return Exec{}, fmt.Errorf("%s: %s: %w", pkg, config, err)
	}
	cfg.Lease, cfg.CacheTTL = 0, 0 // refused: not used
	return Exec{Cfg: cfg, Pkg: pkg, ClaimLease: claimLease}, nil
}

// Call is one Do or DoTx: the caller's scope and key, and the claim's
// arguments.
type Call struct {
	Scope, Key string
	Args       storage.ClaimArgs
	// Releasing is set while fn runs and after it returned a retryable
	// error (or panicked): the rollback then gives the key back, and is
	// observed as idem.OpRelease.
	Releasing bool
}

// NewCall checks the call's arguments as an idem.Guard does and builds the
// claim's: the store key is storage.ScopedStoreKey's, so that an executor and
// an idem.Guard with the same namespace share records.
func (x *Exec) NewCall(scope, key string, payload []byte, fnNil bool) (*Call, error) {
	if fnNil {
		return nil, errors.New(x.Pkg + ": TxGuard: fn is nil")
	}
	if err := x.Cfg.CheckKey(scope, key); err != nil {
		return nil, err
	}
	return &Call{Scope: scope, Key: key, Args: storage.ClaimArgs{
		Key:         storage.ScopedStoreKey(x.Cfg.Namespace, scope, key),
		Fingerprint: x.Cfg.Fingerprint(nil, payload),
		Lease:       x.ClaimLease,
		Retention:   x.Cfg.Retention,
	}}, nil
}

// errLeaseHeld is in the chain of the answer of a claim that found the key
// held by a plain Guard's live lease (Exec.claimed): [Exec.WaitLease]
// polls while Config.Wait allows.
var errLeaseHeld = errors.New("held by a lease")

// WaitLease runs do until it answers anything but a key held by a plain
// Guard's live lease, or Config.Wait has passed, pausing between tries
// from 5ms doubling to 500ms.
func (x *Exec) WaitLease(ctx context.Context, c *Call, do func() (idem.Result, error)) (idem.Result, error) {
	until := time.Now().Add(x.Cfg.Wait)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		res, err := do()
		left := time.Until(until)
		if !errors.Is(err, errLeaseHeld) || left <= 0 {
			return res, err
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return idem.Result{}, fmt.Errorf("%s: waiting for the outcome (key %q): %w", x.Pkg, c.Key, context.Cause(ctx))
		}
	}
}

// claimed answers a claim that did not acquire the key: done is false
// when it did, and fn is to run. A duplicate replays as the Guard's Do replays it;
// a key held by a plain Guard's live lease is idem.ErrInProgress, with
// errLeaseHeld in the chain.
func (x *Exec) claimed(cl storage.Claim, c *Call) (res idem.Result, done bool, err error) {
	switch cl.Outcome {
	case storage.Duplicate:
		if cl.Record.Status == storage.StatusFailed {
			return idem.Result{Replayed: true}, true, &idem.PermanentError{Err: storage.DecodeFailure(cl.Record.Result), Replayed: true}
		}
		return idem.Result{Value: cl.Record.Result, Replayed: true}, true, nil
	case storage.Busy:
		return idem.Result{}, true, fmt.Errorf("%w (key %q, attempt %d): %w", idem.ErrInProgress, c.Key, cl.Record.Attempt, errLeaseHeld)
	}
	return idem.Result{}, false, nil
}

// Run is what an executor does once its claim, sent at sent, answered cl
// or err: it observes the claim, answers one that failed or did not
// acquire the key, and else runs fn (observed as idem.OpRun, with
// c.Releasing set while it runs). done reports that res, err are the
// caller's answer: a claim that failed or did not acquire the key, or
// fn's retryable error, which its transaction is to roll back. Otherwise
// fn ran and its outcome is to be stored: res.Value is its value and err
// its permanent error or nil. A panic of fn goes through Run.
func (x *Exec) Run(ctx context.Context, c *Call, cl storage.Claim, err error, sent time.Time, fn func() ([]byte, error)) (res idem.Result, done bool, _ error) {
	x.observe(ctx, c, idem.Event{Op: idem.OpClaim, Outcome: cl.Outcome, Attempt: cl.Record.Attempt, Duration: time.Since(sent), Err: err})
	if err != nil {
		return idem.Result{}, true, err
	}
	if res, done, err := x.claimed(cl, c); done {
		return res, true, err
	}
	started := time.Now()
	c.Releasing = true
	value, ferr := fn()
	x.observe(ctx, c, idem.Event{Op: idem.OpRun, Duration: time.Since(started), Err: ferr})
	if ferr != nil && !idem.IsPermanent(ferr) {
		return idem.Result{}, true, ferr
	}
	c.Releasing = false
	return idem.Result{Value: value}, false, ferr
}

// Outcome is Do's answer once fn ran and returned value and ferr (nil or
// permanent), and storing the outcome returned err.
func Outcome(value []byte, ferr, err error) (idem.Result, error) {
	switch {
	case err != nil:
		return idem.Result{}, errors.Join(ferr, err)
	case ferr != nil:
		return idem.Result{}, ferr
	}
	return idem.Result{Value: value}, nil
}

// observe reports e, about c, to the Config's Observer.
func (x *Exec) observe(ctx context.Context, c *Call, e idem.Event) {
	if x.Cfg.Observer != nil {
		e.Namespace, e.Scope, e.Key = x.Cfg.Namespace, c.Scope, c.Key
		x.Cfg.Observer(ctx, e)
	}
}

// Finished observes the storing of fn's outcome (op: idem.OpComplete or
// OpFail, sent at sent), which ended with err (its commit included, in
// Do), logs a failure, and returns err.
func (x *Exec) Finished(ctx context.Context, c *Call, op idem.Op, sent time.Time, err error) error {
	x.observe(ctx, c, idem.Event{Op: op, Duration: time.Since(sent), Err: err})
	if err != nil {
		x.warn(ctx, c, "TxGuard: the outcome was not stored", op, err)
	}
	return err
}

// StoreErr observes and logs err, the database's failure in step op of c,
// and returns it.
func (x *Exec) StoreErr(ctx context.Context, c *Call, op idem.Op, err error) error {
	x.observe(ctx, c, idem.Event{Op: op, Err: err})
	x.warn(ctx, c, "TxGuard: the database failed", op, err)
	return err
}

func (x *Exec) warn(ctx context.Context, c *Call, msg string, op idem.Op, err error) {
	x.Cfg.Logger.WarnContext(ctx, x.Pkg+": "+msg, slog.String("op", op.String()), slog.String("namespace", x.Cfg.Namespace),
		slog.String("scope", c.Scope), slog.String("key", c.Key), slog.Any("error", err))
}

// Cleanup runs undo (a rollback), detached from the caller's cancellation
// with its own timeout (Config.StoreTimeout): a caller that gave up must
// not leave a transaction open. It is observed as idem.OpRelease when it
// gives the key back (c.Releasing).
func (x *Exec) Cleanup(ctx context.Context, c *Call, undo func(context.Context) error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.Cfg.StoreTimeout)
	defer cancel()
	err := undo(ctx)
	if c.Releasing {
		x.observe(ctx, c, idem.Event{Op: idem.OpRelease, Duration: time.Since(start), Err: err})
	}
}
