package idem

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/idemgo/idem/storage"
)

// Guard runs operations at most once per idempotency key, over a
// [storage.Store].
// It is safe for concurrent use. Create one with [New] and [Guard.Close] it
// when done: it owns the heartbeat goroutine.
type Guard struct {
	store    storage.Store
	maxValue int  // the store's MaxValueSize, or 0
	sha256   bool // cfg.Fingerprint is the default, SHA256Fingerprint
	cfg      Config
	cache    *cache
	epoch    time.Time // when New ran, for monoNow
	hb       heartbeats
	closed   atomic.Bool
	// observerPanicked: the Observer panicked once, and was logged.
	observerPanicked atomic.Bool
}

// Result is what [Guard.Do] returns on success.
type Result struct {
	// Value is the operation's value: fresh from fn, or replayed from the
	// store or the local cache. It belongs to the caller.
	Value []byte
	// Replayed is true when fn did not run in this call: the value is the
	// outcome of an earlier run.
	Replayed bool
}

// New returns a Guard over store. It fails when store is nil or cfg has a
// field out of range; the error names the field.
func New(store storage.Store, cfg Config) (*Guard, error) {
	if store == nil {
		return nil, errors.New("idem: New: store is nil")
	}
	sha := cfg.Fingerprint == nil
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	g := &Guard{store: store, cfg: cfg, sha256: sha, epoch: time.Now()}
	g.maxValue = max(0, store.MaxValueSize())
	if cfg.CacheSize > 0 {
		g.cache = newCache(cfg.CacheSize, cfg.CacheTTL)
	}
	g.hb.init(g)
	return g, nil
}

// Close stops the Guard's heartbeat goroutine and waits for it. Call it
// once no Do is running: an operation still running would lose its
// heartbeat, so Close cancels its context with the cause ErrClosed, and its
// Do releases the key unless fn returns a value anyway. Do after Close
// returns ErrClosed. Close is idempotent.
func (g *Guard) Close() error {
	g.closed.Store(true)
	g.hb.close()
	return nil
}

// Store returns the Guard's store.
func (g *Guard) Store() storage.Store { return g.store }

// StoreKey returns the store key the Guard uses for an unscoped key: its
// namespace and key combined by [storage.StoreKey].
func (g *Guard) StoreKey(key string) string { return storage.StoreKey(g.cfg.Namespace, key) }

// ScopedStoreKey returns the store key the Guard uses for key in scope: its
// namespace, scope and key combined by [storage.ScopedStoreKey]. Use it to inspect or
// delete a record that [Guard.DoScoped] wrote.
func (g *Guard) ScopedStoreKey(scope, key string) string {
	return storage.ScopedStoreKey(g.cfg.Namespace, scope, key)
}

// Config returns the Guard's configuration with the defaults filled in.
func (g *Guard) Config() Config { return g.cfg }

type tokenKey struct{}

// TokenFrom returns the lease token that fn's context carries in [Guard.Do],
// so business writes can be fenced with it: a write that carries the token
// and is refused for an older one cannot be made by a stale holder.
func TokenFrom(ctx context.Context) (storage.Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(storage.Token)
	return t, ok
}

type attemptKey struct{}

// AttemptFrom returns the attempt that fn's context carries in [Guard.Do]:
// the number of claims of its key, this one included, as the store counts
// them (storage.Record.Attempt): 1 at the first, one more at each claim
// after a failure, a release, a lost lease or a crash. It outlives the
// process, so a caller can bound the runs of a key across restarts (as
// Config.MaxAttempts does for every key of the Guard).
func AttemptFrom(ctx context.Context) (int, bool) {
	a, ok := ctx.Value(attemptKey{}).(int)
	return a, ok
}

// Do runs fn at most once to completion for key in the Guard's namespace and
// returns its outcome:
//
//   - The first caller claims the key and runs fn under a context that
//     carries the token ([TokenFrom]) and is cancelled, with a cause
//     wrapping ErrLeaseLost, if the lease is lost or cannot be confirmed in
//     time. fn's value is stored (Complete) and returned.
//   - fn's error marked with [Permanent] is stored (Fail) and returned;
//     duplicates get it back as a *PermanentError.
//   - Any other error, or a panic, releases the key so a retry runs fn
//     again; the error is returned as is and the panic re-raised.
//   - A duplicate gets the stored value with Result.Replayed set, or the
//     stored permanent error.
//   - A call while another holder runs fn waits up to Config.Wait for its
//     outcome, then returns ErrInProgress.
//
// payload is fingerprinted: the same key with another payload gets
// ErrKeyReused. Other errors: ErrInvalidKey for a bad key, ErrRefused
// when the store answered and refuses this key alone (never run unguarded,
// also under Config.FailOpen), ErrStoreUnavailable wrapping the store's
// error (unless Config.FailOpen), ErrLeaseLost when fn
// finished but its lease had been taken over (Result.Value then holds fn's
// value, which was not stored), and the context's error when ctx ends while
// claiming or waiting.
//
// The outcome is written under a context detached from ctx: a caller that
// gives up once fn has run does not leave the key in progress.
func (g *Guard) Do(ctx context.Context, key string, payload []byte, fn func(ctx context.Context) ([]byte, error)) (Result, error) {
	return g.DoScoped(ctx, "", key, payload, fn)
}

// DoScoped is [Guard.Do] for key within scope: a tenant, an authenticated
// principal, a route. The same key in two scopes names two operations, so a
// client of one scope can never receive the outcome another scope stored.
// The Guard composes namespace, scope and key without ambiguity
// ([storage.ScopedStoreKey]); Config.MaxKeyLen and Config.ValidateKey apply to key
// alone, and scope may be up to [MaxScopeLen] bytes (ErrInvalidKey beyond).
// The empty scope is the one Do uses.
func (g *Guard) DoScoped(ctx context.Context, scope, key string, payload []byte, fn func(ctx context.Context) ([]byte, error)) (Result, error) {
	if fn == nil {
		return Result{}, errNilFunc
	}
	if g.closed.Load() {
		return Result{}, ErrClosed
	}
	if err := g.cfg.CheckKey(scope, key); err != nil {
		return Result{}, err
	}
	var now time.Time
	if g.cache != nil {
		now = time.Now() // compared with records' expiry, a wall time
	} else {
		now = g.monoNow()
	}
	var kb [256]byte
	k := g.appendStoreKey(kb[:0], scope, key)
	var args storage.ClaimArgs
	var buf *[]byte // args' bytes, lent to the store: see claimArgs
	if g.cache != nil && g.sha256 {
		// The default configuration answers a cached duplicate with no
		// allocation but the value's copy: store key and fingerprint are
		// on the stack until the cache misses.
		sum := sha256.Sum256(payload)
		if res, err, ok := g.fromCache(ctx, scope, key, k, sum[:], now); ok {
			return res, err
		}
		args, buf = g.claimArgs(k, sum[:], nil)
	} else {
		args, buf = g.claimArgs(k, nil, payload)
		if g.cache != nil {
			if res, err, ok := g.fromCache(ctx, scope, key, k, args.Fingerprint, now); ok {
				lent.put(buf)
				return res, err
			}
		}
	}
	res, err := g.claimAndRun(ctx, scope, key, args, buf != nil, now, fn)
	lent.put(buf)
	return res, err
}

// claimAndRun claims args, sent at now, and runs fn if it acquires the key,
// else answers from the record, waiting while the key is busy. args' bytes
// are lent when borrowed is set: the store keeps nothing of them, and they
// go back to the pool once claimAndRun returns, so whatever outlives the
// claim (the call, a cached record) gets copies.
func (g *Guard) claimAndRun(ctx context.Context, scope, key string, args storage.ClaimArgs, borrowed bool, now time.Time, fn func(ctx context.Context) ([]byte, error)) (Result, error) {
	var waitUntil time.Time
	backoff := 5 * time.Millisecond
	for sent := now; ; sent = g.monoNow() {
		cl, err := g.store.Claim(ctx, args)
		if g.cfg.Observer != nil {
			g.observe(ctx, Event{Op: OpClaim, Scope: scope, Key: key, Outcome: cl.Outcome, Attempt: cl.Record.Attempt, Duration: time.Since(sent), Err: claimErr(cl, err)})
		}
		if err != nil {
			switch {
			case errors.Is(err, ErrKeyReused):
				return Result{}, fmt.Errorf("%w (key %q)", ErrKeyReused, key)
			case ctx.Err() != nil:
				return Result{}, fmt.Errorf("idem: claim: %w", context.Cause(ctx))
			case errors.Is(err, ErrRefused): // the store answered: never fail open
				return Result{}, fmt.Errorf("idem: claim (key %q): %w", key, err)
			case g.cfg.FailOpen:
				return g.runOpen(ctx, scope, key, err, fn)
			}
			return Result{}, fmt.Errorf("%w: claim: %w", ErrStoreUnavailable, err)
		}
		switch cl.Outcome {
		case storage.Acquired:
			// Only now is there a run to keep state for.
			if borrowed {
				args = own(args)
			}
			c := &call{g: g, scope: scope, key: key, storeKey: args.Key, fingerprint: args.Fingerprint, token: cl.Token, attempt: cl.Record.Attempt}
			return c.run(ctx, sent, fn)
		case storage.Duplicate:
			if g.cache != nil && cl.Record.Status.Done() {
				if borrowed {
					args = own(args)
				}
				g.cacheRecord(args.Key, args.Fingerprint, cl.Record)
			}
			return replay(cl.Record)
		case storage.Busy:
			if waitUntil.IsZero() {
				waitUntil = sent.Add(g.cfg.Wait)
			}
			left := time.Until(waitUntil)
			if left <= 0 {
				return Result{}, fmt.Errorf("%w (key %q, attempt %d)", ErrInProgress, key, cl.Record.Attempt)
			}
			pause := min(backoff/2+rand.N(backoff/2+1), left)
			backoff = min(2*backoff, 500*time.Millisecond)
			if err := sleep(ctx, pause); err != nil {
				return Result{}, fmt.Errorf("idem: waiting for the outcome: %w", err)
			}
		default:
			return Result{}, fmt.Errorf("%w: claim answered an unknown outcome %v", ErrStoreUnavailable, cl.Outcome)
		}
	}
}

// monoNow returns the time now read from the monotonic clock alone, which
// costs about two thirds of time.Now's pair of readings, wall and
// monotonic. Its wall reading is New's, advanced by the monotonic time
// since: it serves the lease and wait arithmetic (when a claim was sent,
// the local lease deadline, the end of a wait), which compares monotonic
// readings only, never a wall time such as a record's expiry.
func (g *Guard) monoNow() time.Time { return g.epoch.Add(time.Since(g.epoch)) }

// appendStoreKey appends the store key of key in scope to b.
func (g *Guard) appendStoreKey(b []byte, scope, key string) []byte {
	return storage.AppendStoreKey(b, g.cfg.Namespace, scope, key)
}

// claimArgs returns the arguments of the Claim of storeKey, the store key
// and the fingerprint in one buffer. The fingerprint is fp when given (the
// Guard's SHA-256, already computed), else that of payload.
//
// The buffer is lent (every store copies what it keeps of a claim's
// arguments; see [storage.Store]): it comes from a pool, and claimArgs
// returns it for the caller to put back once the claim is answered, with
// no allocation.
func (g *Guard) claimArgs(storeKey, fp, payload []byte) (storage.ClaimArgs, *[]byte) {
	n := len(storeKey)
	var buf []byte
	var pooled *[]byte
	pooled = lent.get(n + sha256.Size)
	buf = append((*pooled)[:0], storeKey...)
	var fingerprint []byte
	switch {
	case fp != nil:
		fingerprint = append(buf[n:n:n+sha256.Size], fp...)
	case g.sha256:
		sum := sha256.Sum256(payload)
		fingerprint = append(buf[n:n:n+sha256.Size], sum[:]...)
	default:
		fingerprint = g.cfg.Fingerprint(buf[n:n:n+sha256.Size], payload)
	}
	if pooled != nil {
		*pooled = buf
	}
	return storage.ClaimArgs{
		// buf[:n] is not written while the string is in use: never, or,
		// lent, not before the claim is answered and its bytes copied.
		Key:         unsafe.String(unsafe.SliceData(buf), n),
		Fingerprint: fingerprint,
		Lease:       g.cfg.Lease,
		Retention:   g.cfg.FailedRetention,
		MaxAttempts: g.cfg.MaxAttempts,
	}, pooled
}

// own returns a with a key and fingerprint of its own, in one allocation,
// for a claim whose bytes were lent.
func own(a storage.ClaimArgs) storage.ClaimArgs {
	n := len(a.Key)
	buf := make([]byte, n+len(a.Fingerprint))
	copy(buf, a.Key)
	copy(buf[n:], a.Fingerprint)
	a.Key = unsafe.String(unsafe.SliceData(buf), n)
	if a.Fingerprint != nil {
		a.Fingerprint = buf[n:len(buf):len(buf)]
	}
	return a
}

// lent is the pool of the buffers a Guard lends its store's Claim.
var lent lendPool

type lendPool struct{ p sync.Pool }

// maxLent is the largest buffer lendPool keeps: longer keys are rare, and
// a pool of them would hold their memory.
const maxLent = 1 << 10

// get returns a buffer with room for n bytes.
func (l *lendPool) get(n int) *[]byte {
	if b, ok := l.p.Get().(*[]byte); ok && cap(*b) >= n {
		return b
	}
	b := make([]byte, 0, max(n, 128))
	return &b
}

// put gives b back once its bytes are no longer in use; nil is ignored.
func (l *lendPool) put(b *[]byte) {
	if b != nil && cap(*b) <= maxLent {
		l.p.Put(b)
	}
}

// replay returns what Do answers a duplicate whose claim found r, a
// Completed or Failed record: r's value with Replayed set, or its stored
// permanent error (decodeFailure).
func replay(r storage.Record) (Result, error) {
	if r.Status == storage.StatusFailed {
		return Result{Replayed: true}, decodeFailure(r.Result)
	}
	return Result{Value: r.Result, Replayed: true}, nil
}

// runOpen runs fn without a claim after the store failed (Config.FailOpen).
func (g *Guard) runOpen(ctx context.Context, scope, key string, cause error, fn func(context.Context) ([]byte, error)) (Result, error) {
	g.cfg.Logger.WarnContext(ctx, "idem: store unavailable, running without idempotency (fail open)",
		slog.String("namespace", g.cfg.Namespace), slog.String("scope", scope), slog.String("key", key), slog.Any("error", cause))
	g.observe(ctx, Event{Op: OpFailOpen, Scope: scope, Key: key, Err: cause})
	v, err := fn(ctx)
	return Result{Value: v}, err
}

// claimErr is the Err of the OpClaim event of a claim that answered cl and
// err: err, or ErrTooManyAttempts for a claim that found, or made, the key
// failed for too many attempts, so that an Observer tells it from the
// replay of an outcome.
func claimErr(cl storage.Claim, err error) error {
	if err == nil && cl.Outcome == storage.Duplicate && cl.Record.Status == storage.StatusFailed &&
		errors.Is(storage.DecodeFailure(cl.Record.Result), ErrTooManyAttempts) {
		return ErrTooManyAttempts
	}
	return err
}

// observe reports e to the Observer. A panic of the Observer is recovered:
// it is called between a step and the next (after a claim, on the
// heartbeat's goroutine), where a panic would leave a key held until its
// lease ends, or end the process. The first panic is logged at error
// level with its stack; the later ones, which the same bug repeats at
// every step, are not.
func (g *Guard) observe(ctx context.Context, e Event) {
	if g.cfg.Observer == nil {
		return
	}
	e.Namespace = g.cfg.Namespace
	defer g.observerPanic(ctx, e.Op)
	g.cfg.Observer(ctx, e)
}

// observerPanic, deferred by observe, recovers the Observer's panic.
func (g *Guard) observerPanic(ctx context.Context, op Op) {
	if v := recover(); v != nil && g.observerPanicked.CompareAndSwap(false, true) {
		g.cfg.Logger.ErrorContext(ctx, "idem: the Observer panicked (recovered; later panics of it are not logged)",
			slog.String("op", op.String()), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// tokenCtx adds the lease token to the caller's context without an
// allocation of its own (it lives inside the call).
type tokenCtx struct {
	context.Context
	token   storage.Token
	attempt int
}

func (t *tokenCtx) Value(key any) any {
	switch key.(type) {
	case tokenKey:
		return t.token
	case attemptKey:
		return t.attempt
	}
	return t.Context.Value(key)
}
