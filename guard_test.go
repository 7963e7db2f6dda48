package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/adaptertest"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

func newMem(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newGuard(t testing.TB, s storage.Store, cfg idem.Config) *idem.Guard {
	t.Helper()
	g, err := idem.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func value(v string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { return []byte(v), nil }
}

// hookStore wraps a store so a test can intercept calls.
type hookStore struct {
	storage.Store
	claims   atomic.Int32
	claim    func(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error)
	extend   func(ctx context.Context, key string, t storage.Token, d time.Duration) error
	complete func(ctx context.Context, key string, t storage.Token, v []byte, r time.Duration) error
}

func (h *hookStore) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	h.claims.Add(1)
	if h.claim != nil {
		return h.claim(ctx, a)
	}
	return h.Store.Claim(ctx, a)
}

func (h *hookStore) Extend(ctx context.Context, key string, t storage.Token, d time.Duration) error {
	if h.extend != nil {
		return h.extend(ctx, key, t, d)
	}
	return h.Store.Extend(ctx, key, t, d)
}

func (h *hookStore) Complete(ctx context.Context, key string, t storage.Token, v []byte, r time.Duration) error {
	if h.complete != nil {
		return h.complete(ctx, key, t, v, r)
	}
	return h.Store.Complete(ctx, key, t, v, r)
}

// The tests of waits, leases and heartbeats run in synctest bubbles, with
// leases as long as in production: the bubble's clock is fake and moves
// only when every goroutine of the bubble waits, so none of them waits on
// real time, and synctest.Wait tells when every goroutine has got as far
// as it can.

func TestDoRunsOnceFor64Goroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &hookStore{Store: newMem(t)}
		g := newGuard(t, h, idem.Config{Wait: time.Minute})
		var runs atomic.Int32
		var wg sync.WaitGroup
		results := make([]idem.Result, 64)
		start, finish := make(chan struct{}), make(chan struct{})
		for i := range results {
			wg.Go(func() {
				<-start
				res, err := g.Do(context.Background(), "order-42", []byte("charge 100"), func(ctx context.Context) ([]byte, error) {
					runs.Add(1)
					<-finish
					return []byte("receipt-1"), nil
				})
				if err != nil {
					t.Errorf("Do: %v", err)
				}
				results[i] = res
			})
		}
		close(start)
		// Every goroutine is blocked: one in fn, the others waiting for
		// its outcome, each after a claim that found the key busy.
		synctest.Wait()
		if n := h.claims.Load(); n < int32(len(results)) {
			t.Errorf("%d claims while fn runs, want every goroutine's", n)
		}
		close(finish)
		wg.Wait()
		if n := runs.Load(); n != 1 {
			t.Fatalf("fn ran %d times for one key, want 1", n)
		}
		fresh := 0
		for _, r := range results {
			if string(r.Value) != "receipt-1" {
				t.Fatalf("a caller got %q, want receipt-1", r.Value)
			}
			if !r.Replayed {
				fresh++
			}
		}
		if fresh != 1 {
			t.Fatalf("%d callers saw a fresh run, want 1", fresh)
		}
	})
}

func TestStalledHolderIsFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMem(t)
		// The stalled holder's heartbeats never reach the store, as when
		// its process is paused or cut off.
		stalled := &hookStore{Store: mem, extend: func(context.Context, string, storage.Token, time.Duration) error {
			return errors.New("network unreachable")
		}}
		gA := newGuard(t, stalled, idem.Config{Lease: 30 * time.Second})
		gB := newGuard(t, mem, idem.Config{Lease: 30 * time.Second, Wait: time.Minute})

		started, resume := make(chan struct{}), make(chan struct{})
		var aErr, aCause error
		var aRes idem.Result
		var wg sync.WaitGroup
		wg.Go(func() {
			aRes, aErr = gA.Do(context.Background(), "k", nil, func(ctx context.Context) ([]byte, error) {
				close(started)
				<-resume // stalls, ignoring its context
				aCause = context.Cause(ctx)
				return []byte("from A"), nil
			})
		})
		<-started
		res, err := gB.Do(context.Background(), "k", nil, value("from B"))
		close(resume)
		wg.Wait()
		if err != nil || res.Replayed || string(res.Value) != "from B" {
			t.Fatalf("B after A's lease ended: %q replayed=%v err=%v, want a fresh run", res.Value, res.Replayed, err)
		}
		if !errors.Is(aErr, idem.ErrLeaseLost) {
			t.Fatalf("stalled holder's Do: %v, want ErrLeaseLost", aErr)
		}
		if string(aRes.Value) != "from A" {
			t.Fatalf("stalled holder's Result.Value = %q, want its fn's value", aRes.Value)
		}
		if !errors.Is(aCause, idem.ErrLeaseLost) {
			t.Fatalf("stalled holder's context cause %v, want ErrLeaseLost", aCause)
		}
		r, err := mem.Get(context.Background(), storage.StoreKey("", "k"))
		if err != nil || r.Status != storage.StatusCompleted || string(r.Result) != "from B" || r.Attempt != 2 {
			t.Fatalf("record %+v (%v), want B's outcome at attempt 2", r, err)
		}
		// Every later duplicate gets B's outcome.
		res, err = gA.Do(context.Background(), "k", nil, value("again"))
		if err != nil || !res.Replayed || string(res.Value) != "from B" {
			t.Fatalf("duplicate: %q %v", res.Value, err)
		}
	})
}

func TestHolderCutOffFromStoreStopsBeforeLeaseEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMem(t)
		var leaseUntil time.Time // the lease end the store granted
		// The store stops answering once the key is claimed: every Extend
		// hangs until its context ends.
		hung := &hookStore{Store: mem,
			claim: func(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
				c, err := mem.Claim(ctx, a)
				leaseUntil = c.Record.LeaseUntil
				return c, err
			},
			extend: func(ctx context.Context, _ string, _ storage.Token, _ time.Duration) error {
				<-ctx.Done()
				return ctx.Err()
			},
		}
		g := newGuard(t, hung, idem.Config{Lease: 30 * time.Second})
		var cancelledAt time.Time
		var cause error
		_, err := g.Do(context.Background(), "k", nil, func(ctx context.Context) ([]byte, error) {
			<-ctx.Done()
			cancelledAt, cause = time.Now(), context.Cause(ctx)
			return nil, ctx.Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Do: %v, want fn's context error", err)
		}
		if !errors.Is(cause, idem.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", cause)
		}
		// memstore's clock is the bubble's: compare directly.
		if !cancelledAt.Before(leaseUntil) {
			t.Fatalf("fn cancelled %v after the store's lease end; it must stop before anyone can take over", cancelledAt.Sub(leaseUntil))
		}
	})
}

// TestHeartbeatKeepsLongRunAlive: over the Guard and a store, a run five
// leases long keeps its key; heartbeat_test.go tests the heartbeat alone.
func TestHeartbeatKeepsLongRunAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 30 * time.Second
		mem := newMem(t)
		g := newGuard(t, mem, idem.Config{Lease: lease})
		running, finish := make(chan struct{}), make(chan struct{})
		var runErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			_, runErr = g.Do(context.Background(), "long", nil, func(ctx context.Context) ([]byte, error) {
				close(running)
				select {
				case <-finish:
					return []byte("ok"), nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			})
		})
		<-running
		// For five leases, every duplicate finds the key busy: the
		// heartbeat keeps extending the lease.
		other := newGuard(t, mem, idem.Config{Lease: lease})
		start := time.Now()
		tick := time.NewTicker(lease / 4)
		for range 20 {
			<-tick.C
			if _, err := other.Do(context.Background(), "long", nil, value("dup")); !errors.Is(err, idem.ErrInProgress) {
				t.Errorf("duplicate %v into the run: %v, want ErrInProgress", time.Since(start), err)
				break
			}
		}
		tick.Stop()
		close(finish)
		wg.Wait()
		if runErr != nil {
			t.Fatalf("long run: %v", runErr)
		}
		r, _ := mem.Get(context.Background(), storage.StoreKey("", "long"))
		if r.Status != storage.StatusCompleted || r.Attempt != 1 {
			t.Fatalf("record %+v, want Completed at attempt 1", r)
		}
	})
}

func TestTokenInContextMatchesRecord(t *testing.T) {
	mem := newMem(t)
	g := newGuard(t, mem, idem.Config{})
	var tok storage.Token
	_, err := g.Do(context.Background(), "k", nil, func(ctx context.Context) ([]byte, error) {
		var ok bool
		tok, ok = idem.TokenFrom(ctx)
		if !ok {
			return nil, errors.New("no token in context")
		}
		r, err := mem.Get(ctx, storage.StoreKey("", "k"))
		if err != nil || r.Token != tok {
			return nil, fmt.Errorf("record token %d, context token %d (%v)", r.Token, tok, err)
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := idem.TokenFrom(context.Background()); ok {
		t.Fatal("TokenFrom found a token in a plain context")
	}
}

func TestPermanentErrorIsStoredAndReplayed(t *testing.T) {
	g := newGuard(t, newMem(t), idem.Config{})
	var runs int
	declined := errors.New("card declined")
	fn := func(context.Context) ([]byte, error) {
		runs++
		return nil, idem.Permanent(fmt.Errorf("charge: %w", declined))
	}
	_, err := g.Do(context.Background(), "k", nil, fn)
	if !errors.Is(err, declined) || !idem.IsPermanent(err) {
		t.Fatalf("first Do: %v, want the permanent error itself", err)
	}
	for range 2 {
		_, err = g.Do(context.Background(), "k", nil, fn)
		var pe *idem.PermanentError
		if !errors.As(err, &pe) || !pe.Replayed || err.Error() != "charge: card declined" {
			t.Fatalf("duplicate: %v, want the replayed permanent error", err)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
}

func TestRetryableErrorReleases(t *testing.T) {
	g := newGuard(t, newMem(t), idem.Config{})
	flaky := errors.New("timeout talking to the bank")
	_, err := g.Do(context.Background(), "k", nil, func(context.Context) ([]byte, error) { return nil, flaky })
	if err != flaky {
		t.Fatalf("Do: %v, want fn's error as is", err)
	}
	res, err := g.Do(context.Background(), "k", nil, value("second try"))
	if err != nil || res.Replayed || string(res.Value) != "second try" {
		t.Fatalf("retry: %q replayed=%v %v, want fn to run again", res.Value, res.Replayed, err)
	}
}

func TestPanicReleasesAndRepanics(t *testing.T) {
	mem := newMem(t)
	g := newGuard(t, mem, idem.Config{})
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the fn's panic value", r)
			}
		}()
		g.Do(context.Background(), "k", nil, func(context.Context) ([]byte, error) { panic("boom") })
		t.Fatal("Do returned after fn panicked")
	}()
	res, err := g.Do(context.Background(), "k", nil, value("after panic"))
	if err != nil || res.Replayed || string(res.Value) != "after panic" {
		t.Fatalf("retry after panic: %q %v, want a fresh run", res.Value, err)
	}
	if r, _ := mem.Get(context.Background(), storage.StoreKey("", "k")); r.Attempt != 2 {
		t.Fatalf("attempt %d, want 2", r.Attempt)
	}
}

// hold runs a Do on key in g whose fn blocks until the returned release is
// called; hold returns once fn runs. release waits for that Do to return,
// and is called at the test's end if the test has not called it.
func hold(t *testing.T, g *idem.Guard, key string, value string) (release func()) {
	t.Helper()
	inside, done := make(chan struct{}), make(chan struct{})
	proceed := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := g.Do(context.Background(), key, nil, func(context.Context) ([]byte, error) {
			close(inside)
			<-proceed
			return []byte(value), nil
		}); err != nil {
			t.Errorf("the holder's Do: %v", err)
		}
	}()
	<-inside
	var once sync.Once
	release = func() {
		once.Do(func() { close(proceed) })
		<-done
	}
	t.Cleanup(release)
	return release
}

func TestBusyWithoutWaitIsErrInProgress(t *testing.T) {
	g := newGuard(t, newMem(t), idem.Config{})
	hold(t, g, "k", "first")
	if _, err := g.Do(context.Background(), "k", nil, value("dup")); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("Do while in progress: %v, want ErrInProgress", err)
	}
}

func TestWaitGetsTheOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &hookStore{Store: newMem(t)}
		g := newGuard(t, h, idem.Config{Wait: time.Minute})
		release := hold(t, g, "k", "first")
		var res idem.Result
		var err error
		var wg sync.WaitGroup
		wg.Go(func() { res, err = g.Do(context.Background(), "k", nil, value("second")) })
		synctest.Wait() // the duplicate waits, having found the key busy
		release()
		wg.Wait()
		if err != nil || !res.Replayed || string(res.Value) != "first" {
			t.Fatalf("waiting duplicate: %q replayed=%v %v, want the first outcome", res.Value, res.Replayed, err)
		}
		if n := h.claims.Load(); n < 3 {
			t.Fatalf("%d claims, want the holder's and at least two of the duplicate's", n)
		}
	})
}

func TestWaitRespectsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(t, newMem(t), idem.Config{Wait: time.Minute})
		hold(t, g, "k", "first")
		const timeout = 2 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		if _, err := g.Do(ctx, "k", nil, value("dup")); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do with an expiring context: %v, want DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != timeout {
			t.Fatalf("Do returned after %v, want when its context ended (%v), not at Config.Wait", waited, timeout)
		}
	})
}

func TestOutcomeStoredWhenCallerGivesUp(t *testing.T) {
	mem := newMem(t)
	g := newGuard(t, mem, idem.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	res, err := g.Do(ctx, "k", nil, func(context.Context) ([]byte, error) {
		cancel() // the caller gives up while fn finishes its work
		return []byte("charged"), nil
	})
	if err != nil || string(res.Value) != "charged" {
		t.Fatalf("Do: %q %v", res.Value, err)
	}
	r, err := mem.Get(context.Background(), storage.StoreKey("", "k"))
	if err != nil || r.Status != storage.StatusCompleted || string(r.Result) != "charged" {
		t.Fatalf("record %+v %v: the outcome must be stored though the caller's context ended", r, err)
	}
}

func TestOutcomeWriteHasItsOwnTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := &hookStore{Store: newMem(t), complete: func(ctx context.Context, _ string, _ storage.Token, _ []byte, _ time.Duration) error {
			<-ctx.Done()
			return ctx.Err()
		}}
		const timeout = 3 * time.Second
		g := newGuard(t, hang, idem.Config{StoreTimeout: timeout})
		start := time.Now()
		_, err := g.Do(context.Background(), "k", nil, value("v"))
		if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do with a hanging Complete: %v, want ErrStoreUnavailable wrapping DeadlineExceeded", err)
		}
		if took := time.Since(start); took != timeout {
			t.Fatalf("Do took %v, want Config.StoreTimeout (%v)", took, timeout)
		}
	})
}

var errDown = errors.New("connection refused")

func downStore(t *testing.T) *hookStore {
	return &hookStore{Store: newMem(t), claim: func(context.Context, storage.ClaimArgs) (storage.Claim, error) {
		return storage.Claim{}, errDown
	}}
}

func TestStoreDownFailsClosed(t *testing.T) {
	g := newGuard(t, downStore(t), idem.Config{})
	ran := false
	_, err := g.Do(context.Background(), "k", nil, func(context.Context) ([]byte, error) { ran = true; return nil, nil })
	if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.Is(err, errDown) {
		t.Fatalf("Do with the store down: %v, want ErrStoreUnavailable wrapping the cause", err)
	}
	if ran {
		t.Fatal("fn ran although the store could not be claimed (fail closed)")
	}
}

func TestStoreDownFailOpenRuns(t *testing.T) {
	var events []idem.Op
	g := newGuard(t, downStore(t), idem.Config{FailOpen: true, Observer: func(_ context.Context, e idem.Event) { events = append(events, e.Op) }})
	res, err := g.Do(context.Background(), "k", nil, value("unguarded"))
	if err != nil || string(res.Value) != "unguarded" {
		t.Fatalf("fail-open Do: %q %v", res.Value, err)
	}
	if len(events) != 2 || events[1] != idem.OpFailOpen {
		t.Fatalf("events %v, want a claim then fail_open", events)
	}
}

func TestMaxAttemptsStopsAPoisonMessage(t *testing.T) {
	g := newGuard(t, newMem(t), idem.Config{MaxAttempts: 3})
	runs := 0
	poison := func(context.Context) ([]byte, error) { runs++; return nil, errors.New("cannot parse") }
	for range 3 {
		g.Do(context.Background(), "k", nil, poison)
	}
	for range 2 {
		_, err := g.Do(context.Background(), "k", nil, poison)
		if !errors.Is(err, idem.ErrTooManyAttempts) || !idem.IsPermanent(err) {
			t.Fatalf("Do after 3 failed attempts: %v, want a permanent ErrTooManyAttempts", err)
		}
	}
	if runs != 3 {
		t.Fatalf("fn ran %d times, want 3", runs)
	}
}

func TestKeyReuseWithAnotherPayload(t *testing.T) {
	g := newGuard(t, newMem(t), idem.Config{})
	if _, err := g.Do(context.Background(), "k", []byte("amount=10"), value("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(context.Background(), "k", []byte("amount=99"), value("v")); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("Do with another payload: %v, want ErrKeyReused", err)
	}
}

func TestNamespacesSeparateKeys(t *testing.T) {
	mem := newMem(t)
	a := newGuard(t, mem, idem.Config{Namespace: "a:b"})
	b := newGuard(t, mem, idem.Config{Namespace: "a"})
	ra, err := a.Do(context.Background(), "c", nil, value("from a:b"))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Do(context.Background(), "b:c", nil, value("from a"))
	if err != nil {
		t.Fatal(err)
	}
	if ra.Replayed || rb.Replayed || string(rb.Value) != "from a" {
		t.Fatalf("namespace a:b key c and namespace a key b:c shared a record: %q %q", ra.Value, rb.Value)
	}
}

func TestInvalidKeys(t *testing.T) {
	noSpaces := func(k string) error {
		if strings.ContainsRune(k, ' ') {
			return errors.New("contains a space")
		}
		return nil
	}
	g := newGuard(t, newMem(t), idem.Config{MaxKeyLen: 8, ValidateKey: noSpaces})
	for _, k := range []string{"", "123456789", "a b"} {
		ran := false
		_, err := g.Do(context.Background(), k, nil, func(context.Context) ([]byte, error) { ran = true; return nil, nil })
		if !errors.Is(err, idem.ErrInvalidKey) || ran {
			t.Errorf("key %q: %v (ran=%v), want ErrInvalidKey without running", k, err, ran)
		}
	}
	if _, err := g.Do(context.Background(), "\x00\xff{}:", nil, value("v")); err != nil {
		t.Errorf("a key of odd bytes: %v, want accepted", err)
	}
}

func TestCacheAnswersDuplicatesLocally(t *testing.T) {
	h := &hookStore{Store: newMem(t)}
	g := newGuard(t, h, idem.Config{CacheSize: 2})
	for _, k := range []string{"a", "b"} {
		if _, err := g.Do(context.Background(), k, []byte(k), value("v-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	before := h.claims.Load()
	res, err := g.Do(context.Background(), "a", []byte("a"), value("again"))
	if err != nil || !res.Replayed || string(res.Value) != "v-a" {
		t.Fatalf("cached duplicate: %q %v", res.Value, err)
	}
	res.Value[0] = 'X' // the caller owns its copy
	if _, err := g.Do(context.Background(), "a", []byte("changed"), value("x")); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("cached key with another payload: %v, want ErrKeyReused", err)
	}
	if h.claims.Load() != before {
		t.Fatalf("cached duplicates reached the store (%d claims)", h.claims.Load()-before)
	}
	res, _ = g.Do(context.Background(), "a", []byte("a"), value("again"))
	if string(res.Value) != "v-a" {
		t.Fatalf("cache entry corrupted by a caller: %q", res.Value)
	}
	// A third key evicts the least recently used ("b").
	g.Do(context.Background(), "c", []byte("c"), value("v-c"))
	g.Do(context.Background(), "b", []byte("b"), value("again"))
	if h.claims.Load() != before+2 {
		t.Fatalf("%d claims, want 2: c, then b after its eviction", h.claims.Load()-before)
	}
}

func TestObserverSeesTheSteps(t *testing.T) {
	var mu sync.Mutex
	var ops []string
	g := newGuard(t, newMem(t), idem.Config{Namespace: "n", Observer: func(_ context.Context, e idem.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Namespace != "n" || e.Key != "k" {
			t.Errorf("event %+v: wrong namespace or key", e)
		}
		ops = append(ops, e.Op.String()+":"+e.Outcome.String())
	}})
	g.Do(context.Background(), "k", nil, value("v"))
	g.Do(context.Background(), "k", nil, value("v"))
	want := "claim:Acquired run:Outcome(0) complete:Outcome(0) claim:Duplicate"
	if got := strings.Join(ops, " "); got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
}

// A claim that finds (or makes) a key failed for too many attempts is
// told from a replay: its event's Err is ErrTooManyAttempts.
func TestObserverTellsTheAttemptCap(t *testing.T) {
	var mu sync.Mutex
	var errs []error
	g := newGuard(t, newMem(t), idem.Config{MaxAttempts: 1, Observer: func(_ context.Context, e idem.Event) {
		if e.Op == idem.OpClaim {
			mu.Lock()
			errs = append(errs, e.Err)
			mu.Unlock()
		}
	}})
	fail := func(context.Context) ([]byte, error) { return nil, errors.New("later") }
	g.Do(context.Background(), "k", nil, fail)
	if _, err := g.Do(context.Background(), "k", nil, fail); !errors.Is(err, idem.ErrTooManyAttempts) {
		t.Fatalf("second Do: %v", err)
	}
	if len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], idem.ErrTooManyAttempts) {
		t.Fatalf("claim events' errors %v, want nil then ErrTooManyAttempts", errs)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	mem := newMem(t)
	for _, c := range []struct {
		cfg   idem.Config
		field string
	}{
		{idem.Config{Lease: time.Millisecond}, "Lease"},
		{idem.Config{Retention: -1}, "Retention"},
		{idem.Config{Wait: -1}, "Wait"},
		{idem.Config{MaxAttempts: -1}, "MaxAttempts"},
		{idem.Config{CacheSize: -1}, "CacheSize"},
	} {
		_, err := idem.New(mem, c.cfg)
		if err == nil || !strings.Contains(err.Error(), "Config."+c.field) {
			t.Errorf("New(%+v) = %v, want an error naming Config.%s", c.cfg, err, c.field)
		}
	}
	if _, err := idem.New(nil, idem.Config{}); err == nil {
		t.Error("New(nil store) succeeded")
	}
}

func TestDoAfterClose(t *testing.T) {
	g, err := idem.New(newMem(t), idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	g.Close()
	ran := false
	if _, err := g.Do(context.Background(), "k", nil, func(context.Context) ([]byte, error) { ran = true; return nil, nil }); !errors.Is(err, idem.ErrClosed) || ran {
		t.Fatalf("Do after Close: %v ran=%v, want ErrClosed without running", err, ran)
	}
}

func TestCloseCancelsRunningOperations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMem(t)
		extended := make(chan string, 10)
		g, err := idem.New(mem, idem.Config{Lease: 30 * time.Second, Observer: func(_ context.Context, e idem.Event) {
			if e.Op == idem.OpExtend && e.Err == nil {
				extended <- e.Key
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		causes := make([]error, 2)
		run := func(i int) {
			running := make(chan struct{})
			wg.Go(func() {
				g.Do(context.Background(), fmt.Sprint("k", i), nil, func(ctx context.Context) ([]byte, error) {
					close(running)
					<-ctx.Done()
					causes[i] = context.Cause(ctx)
					return nil, ctx.Err()
				})
			})
			<-running
		}
		// k0's lease has been extended once when Close comes; k1 waits for
		// its first heartbeat.
		run(0)
		if k := <-extended; k != "k0" {
			t.Fatalf("extended %s, want k0", k)
		}
		run(1)
		g.Close()
		wg.Wait()
		for i, c := range causes {
			if !errors.Is(c, idem.ErrClosed) {
				t.Errorf("operation %d: cause %v, want ErrClosed", i, c)
			}
			if r, err := mem.Get(context.Background(), storage.StoreKey("", fmt.Sprint("k", i))); err != nil || r.Token != 0 {
				t.Errorf("operation %d: record %+v %v, want released", i, r, err)
			}
		}
	})
}

func TestStoreKeyIsUnambiguous(t *testing.T) {
	seen := map[string]string{}
	for _, p := range [][2]string{{"a:b", "c"}, {"a", "b:c"}, {"", "ab"}, {"a", "b"}, {"ab", ""}, {"\x01", "a"}, {"", "\x01a"}} {
		k := storage.StoreKey(p[0], p[1])
		if prev, ok := seen[k]; ok {
			t.Fatalf("StoreKey(%q, %q) = StoreKey of %s", p[0], p[1], prev)
		}
		seen[k] = fmt.Sprintf("%q", p)
	}
	if !bytes.HasSuffix([]byte(storage.StoreKey("ns", "key")), []byte("key")) {
		t.Fatal("StoreKey does not end with the key")
	}
}

// A key reused with another payload and answered from the local cache
// reaches the Observer as ErrKeyReused, as it does from the store, not as
// a plain replay.
func TestCacheHitOfReusedKeyIsObservedAsReused(t *testing.T) {
	var mu sync.Mutex
	var hits []idem.Event
	g := newGuard(t, newMem(t), idem.Config{CacheSize: 10, Observer: func(_ context.Context, e idem.Event) {
		if e.Op == idem.OpCacheHit {
			mu.Lock()
			hits = append(hits, e)
			mu.Unlock()
		}
	}})
	ctx := context.Background()
	if _, err := g.Do(ctx, "order-1", []byte("a"), value("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx, "order-1", []byte("a"), value("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx, "order-1", []byte("b"), value("v")); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("Do with another payload: %v, want ErrKeyReused", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hits) != 2 || hits[0].Err != nil || !errors.Is(hits[1].Err, idem.ErrKeyReused) {
		t.Fatalf("cache hits observed: %+v; want a replay, then one with ErrKeyReused", hits)
	}
}

// A panicking Observer, called between the steps of a Do (after the claim,
// after the run, on the heartbeat), neither leaves the key held nor ends
// the process: the Do goes on, and the first panic is logged once.
func TestObserverPanicRecovered(t *testing.T) {
	var logs adaptertest.Logs
	g := newGuard(t, newMem(t), idem.Config{Lease: 300 * time.Millisecond, Logger: logs.Logger(),
		Observer: func(ctx context.Context, e idem.Event) { panic("observer bug at " + e.Op.String()) }})

	res, err := g.Do(t.Context(), "k", []byte("p"), func(context.Context) ([]byte, error) {
		time.Sleep(250 * time.Millisecond) // a heartbeat or two
		return []byte("v"), nil
	})
	if err != nil || string(res.Value) != "v" || res.Replayed {
		t.Fatalf("Do = %q, %v, %v; want the fresh value", res.Value, res.Replayed, err)
	}
	res, err = g.Do(t.Context(), "k", []byte("p"), value("again"))
	if err != nil || string(res.Value) != "v" || !res.Replayed {
		t.Fatalf("second Do = %q, %v, %v; want the stored value replayed", res.Value, res.Replayed, err)
	}
	if n := strings.Count(logs.String(), "Observer panicked"); n != 1 {
		t.Fatalf("the Observer's panics were logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "observer bug at claim") {
		t.Errorf("the log does not carry the panic's value:\n%s", logs.String())
	}
}

// fn's context carries the store's count of the key's claims, in Do and in
// batches alike, so that a caller can bound a key's runs across processes.
func TestAttemptFrom(t *testing.T) {
	g := newGuard(t, newMem(t), idem.Config{})
	var got []int
	fail := func(ctx context.Context) ([]byte, error) {
		a, ok := idem.AttemptFrom(ctx)
		if !ok {
			t.Error("fn's context carries no attempt")
		}
		got = append(got, a)
		return nil, errors.New("downstream timeout")
	}
	for range 2 {
		g.Do(t.Context(), "k", nil, fail)
	}
	g.DoBatchIndependent(t.Context(), []idem.BatchOp{{Key: "k"}}, func(ctx context.Context, _ int) ([]byte, error) { return fail(ctx) })
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("attempts seen by fn = %v, want [1 2 3]", got)
	}
	if _, ok := idem.AttemptFrom(t.Context()); ok {
		t.Error("a context outside Do carries an attempt")
	}
}
