package coalesce_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/coalesce"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

var newMem = idemtest.MemStore

func TestCoalesceConformance(t *testing.T) {
	s := coalesce.New(newMem(t))
	idemtest.Run(t, func(t *testing.T) storage.Store { return s })
}

// gatedStore is a memstore whose Claim, ClaimBatch, Complete and
// CompleteBatch log their call, then wait for a receive from gate (or the
// end of their context) before they run.
type gatedStore struct {
	*memstore.Store
	gate chan struct{}

	mu       sync.Mutex
	log      []string          // "Claim", "ClaimBatch 3", "Complete", "CompleteBatch 2", "Release"
	batchCtx []context.Context // the contexts of ClaimBatch and CompleteBatch
}

func newGated(t *testing.T) *gatedStore {
	return &gatedStore{Store: newMem(t), gate: make(chan struct{})}
}

func (s *gatedStore) note(ctx context.Context, call string, batch bool) error {
	s.mu.Lock()
	s.log = append(s.log, call)
	if batch {
		s.batchCtx = append(s.batchCtx, ctx)
	}
	s.mu.Unlock()
	select {
	case <-s.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// open lets one call waiting at the gate run, and fails t if none comes
// (in a synctest bubble, where time runs as soon as all wait).
func (s *gatedStore) open(t *testing.T) {
	t.Helper()
	select {
	case s.gate <- struct{}{}:
	case <-time.After(time.Hour):
		t.Fatal("no store call waits at the gate")
	}
}

func (s *gatedStore) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

func (s *gatedStore) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if err := s.note(ctx, "Claim", false); err != nil {
		return storage.Claim{}, err
	}
	return s.Store.Claim(ctx, a)
}

func (s *gatedStore) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	if err := s.note(ctx, fmt.Sprint("ClaimBatch ", len(args)), true); err != nil {
		return nil, err
	}
	return s.Store.ClaimBatch(ctx, args)
}

func (s *gatedStore) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	if err := s.note(ctx, "Complete", false); err != nil {
		return err
	}
	return s.Store.Complete(ctx, key, t, value, retention)
}

func (s *gatedStore) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	if err := s.note(ctx, fmt.Sprint("CompleteBatch ", len(cs)), true); err != nil {
		return nil, err
	}
	return s.Store.CompleteBatch(ctx, cs)
}

func (s *gatedStore) Release(ctx context.Context, key string, t storage.Token) error {
	s.mu.Lock()
	s.log = append(s.log, "Release")
	s.mu.Unlock()
	return s.Store.Release(ctx, key, t)
}

// holding returns a gatedStore, Coalesce over it, and the answer to come
// of a claim of "first" held at the gate: the calls made next queue.
func holding(t *testing.T) (*gatedStore, storage.Store, <-chan answer) {
	g := newGated(t)
	s := coalesce.New(g)
	first := claimAsync(context.Background(), s, claimOf("first"))
	synctest.Wait()
	return g, s, first
}

func claimOf(key string) storage.ClaimArgs {
	return storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Hour}
}

// answer is what one Claim call returned.
type answer struct {
	claim storage.Claim
	err   error
}

// claimAsync calls Claim on its own goroutine and returns where its
// answer arrives.
func claimAsync(ctx context.Context, s storage.Store, a storage.ClaimArgs) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		c, err := s.Claim(ctx, a)
		ch <- answer{c, err}
	}()
	return ch
}

func wantCalls(t *testing.T, s *gatedStore, want ...string) {
	t.Helper()
	if got := s.calls(); !slices.Equal(got, want) {
		t.Fatalf("store calls %q, want %q", got, want)
	}
}

// A claim made while the store is idle goes to Claim at once; the claims
// made while it is in flight go together in one ClaimBatch, in their order,
// and every caller gets its own answer.
func TestCoalesceBatchesQueuedClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, first := holding(t)
		ctx := context.Background()
		wantCalls(t, g, "Claim")

		const n = 10
		var queued []<-chan answer
		for i := range n {
			queued = append(queued, claimAsync(ctx, s, claimOf(fmt.Sprint("k", i%7)))) // k0..k2 twice
			synctest.Wait()                                                            // keeps their order
		}
		wantCalls(t, g, "Claim")
		g.open(t)
		if a := <-first; a.err != nil || a.claim.Outcome != storage.Acquired {
			t.Fatalf("first claim: %v, %v", a.claim.Outcome, a.err)
		}
		synctest.Wait()
		wantCalls(t, g, "Claim", fmt.Sprint("ClaimBatch ", n))
		g.open(t)
		for i, ch := range queued {
			a := <-ch
			want := storage.Acquired
			if i >= 7 {
				want = storage.Busy // the second claim of its key, which the first holds
			}
			if a.err != nil || a.claim.Outcome != want {
				t.Errorf("claim %d of k%d: %v, %v; want %v", i, i%7, a.claim.Outcome, a.err, want)
			}
		}
		// Idle again: the next claim goes alone.
		next := claimAsync(ctx, s, claimOf("next"))
		synctest.Wait()
		g.open(t)
		<-next
		wantCalls(t, g, "Claim", fmt.Sprint("ClaimBatch ", n), "Claim")
	})
}

// More claims than a batch holds go in batches of CoalesceMaxBatch, in
// order.
func TestCoalesceSplitsAtMaxBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, first := holding(t)
		ctx := context.Background()
		n := 2*coalesce.MaxBatch + 1
		var queued []<-chan answer
		for i := range n {
			queued = append(queued, claimAsync(ctx, s, claimOf(fmt.Sprint("k", i))))
		}
		synctest.Wait()
		for range 4 {
			g.open(t)
		}
		<-first
		for i, ch := range queued {
			if a := <-ch; a.err != nil || a.claim.Outcome != storage.Acquired {
				t.Errorf("claim %d: %v, %v", i, a.claim.Outcome, a.err)
			}
		}
		b := fmt.Sprint("ClaimBatch ", coalesce.MaxBatch)
		wantCalls(t, g, "Claim", b, b, "ClaimBatch 1")
	})
}

// Completes made while one is in flight go in one CompleteBatch; each
// caller gets its own verdict.
func TestCoalesceBatchesQueuedCompletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGated(t)
		s := coalesce.New(g)
		ctx := context.Background()
		var tokens []storage.Token
		for i := range 4 {
			a := claimAsync(ctx, s, claimOf(fmt.Sprint("k", i)))
			g.open(t)
			tokens = append(tokens, (<-a).claim.Token)
		}
		complete := func(key string, tok storage.Token) <-chan error {
			ch := make(chan error, 1)
			go func() { ch <- s.Complete(ctx, key, tok, []byte("v-"+key), time.Hour) }()
			synctest.Wait()
			return ch
		}
		first := complete("k0", tokens[0])
		good := complete("k1", tokens[1])
		stale := complete("k2", tokens[2]+1000)
		good2 := complete("k3", tokens[3])
		g.open(t)
		synctest.Wait()
		g.open(t)
		for i, ch := range []<-chan error{first, good, good2} {
			if err := <-ch; err != nil {
				t.Errorf("Complete %d: %v", i, err)
			}
		}
		if err := <-stale; !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("Complete with a stale token: %v, want ErrLeaseLost", err)
		}
		wantCalls(t, g, "Claim", "Claim", "Claim", "Claim", "Complete", "CompleteBatch 3")
		for i, want := range []storage.Status{storage.StatusCompleted, storage.StatusCompleted, storage.StatusInProgress, storage.StatusCompleted} {
			rec, err := g.Get(ctx, fmt.Sprint("k", i))
			if err != nil || rec.Status != want {
				t.Errorf("k%d: %v, %v; want %v", i, rec.Status, err, want)
			}
		}
	})
}

// A caller that gives up while queued returns at once and its claim is
// never sent; one that gives up while its batch is in flight returns at
// once, the batch goes on for the others, and the claim acquired for it is
// released.
func TestCoalesceCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, first := holding(t)
		bg := context.Background()

		ctxA, cancelA := context.WithCancel(bg)
		a := claimAsync(ctxA, s, claimOf("a"))
		ctxB, cancelB := context.WithCancel(bg)
		b := claimAsync(ctxB, s, claimOf("b"))
		c := claimAsync(bg, s, claimOf("c"))
		synctest.Wait()

		cancelA() // queued
		synctest.Wait()
		select {
		case got := <-a:
			if !errors.Is(got.err, context.Canceled) {
				t.Fatalf("a gave up while queued: %v, want context.Canceled", got.err)
			}
		default:
			t.Fatal("a gave up while queued and is still waiting")
		}

		g.open(t)
		<-first
		synctest.Wait()
		wantCalls(t, g, "Claim", "ClaimBatch 2") // b and c, not a

		cancelB() // in flight
		synctest.Wait()
		select {
		case got := <-b:
			if !errors.Is(got.err, context.Canceled) {
				t.Fatalf("b gave up in flight: %v, want context.Canceled", got.err)
			}
		default:
			t.Fatal("b gave up in flight and is still waiting")
		}
		if err := g.batchCtx[0].Err(); err != nil {
			t.Fatalf("the batch's context ended when one of its two callers gave up: %v", err)
		}
		g.open(t)
		if got := <-c; got.err != nil || got.claim.Outcome != storage.Acquired {
			t.Fatalf("c: %v, %v", got.claim.Outcome, got.err)
		}
		synctest.Wait()
		wantCalls(t, g, "Claim", "ClaimBatch 2", "Release")
		if _, err := g.Get(bg, "a"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("a was claimed after its caller gave up: %v", err)
		}
		rec, err := g.Get(bg, "b")
		if err != nil || rec.Status != storage.StatusInProgress || rec.Token != 0 {
			t.Errorf("b's claim was not released: %+v, %v", rec, err)
		}
		// Released: the next claim takes over at once.
		again := claimAsync(bg, s, claimOf("b"))
		synctest.Wait()
		g.open(t)
		if got := <-again; got.err != nil || got.claim.Outcome != storage.Acquired || got.claim.Record.Attempt != 2 {
			t.Errorf("claim of b after the release: %v attempt %d, %v", got.claim.Outcome, got.claim.Record.Attempt, got.err)
		}
	})
}

// The batch's context ends once every caller in it has given up.
func TestCoalesceBatchEndsWhenAllGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, first := holding(t)
		bg := context.Background()
		ctx1, cancel1 := context.WithCancel(bg)
		ctx2, cancel2 := context.WithTimeout(bg, time.Second)
		defer cancel2()
		a1 := claimAsync(ctx1, s, claimOf("a1"))
		a2 := claimAsync(ctx2, s, claimOf("a2"))
		synctest.Wait()
		g.open(t)
		<-first
		synctest.Wait()
		wantCalls(t, g, "Claim", "ClaimBatch 2")
		cancel1()
		synctest.Wait()
		if err := g.batchCtx[0].Err(); err != nil {
			t.Fatalf("the batch's context ended while a caller waits: %v", err)
		}
		time.Sleep(time.Second) // a2's deadline
		synctest.Wait()
		if err := g.batchCtx[0].Err(); err == nil {
			t.Fatal("the batch's context lives on after every caller gave up")
		}
		if err := (<-a1).err; !errors.Is(err, context.Canceled) {
			t.Errorf("a1: %v", err)
		}
		if err := (<-a2).err; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a2: %v", err)
		}
		wantCalls(t, g, "Claim", "ClaimBatch 2") // the batch failed: nothing to release
	})
}

// A caller whose context ends gets its context's error, also when the
// batch it was in failed because of it: the batch's error and the end of
// the caller's wait race, so the case runs many times.
func TestCoalesceCallerGetsItsContextsError(t *testing.T) {
	for range 100 {
		synctest.Test(t, func(t *testing.T) {
			g, s, first := holding(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			a := claimAsync(ctx, s, claimOf("a"))
			synctest.Wait()
			g.open(t)
			<-first
			synctest.Wait() // the batch waits at the gate, until a's deadline ends it
			if err := (<-a).err; !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a: %v, want its context's error", err)
			}
		})
	}
}

// An error of one key goes to its caller alone; a claim the batch would
// refuse as a whole goes to the store alone.
func TestCoalescePerKeyErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGated(t)
		s := coalesce.New(g)
		bg := context.Background()
		if _, err := g.Store.Claim(bg, claimOf("used")); err != nil {
			t.Fatal(err)
		}
		first := claimAsync(bg, s, claimOf("first"))
		synctest.Wait()
		reused := claimOf("used")
		reused.Fingerprint = []byte("other")
		r := claimAsync(bg, s, reused)
		ok := claimAsync(bg, s, claimOf("ok"))
		bad := claimOf("bad")
		bad.Lease = 0
		synctest.Wait()
		b := claimAsync(bg, s, bad) // the memstore refuses it alone, gate held by first
		synctest.Wait()
		wantCalls(t, g, "Claim", "Claim")
		g.open(t)
		g.open(t)
		<-first
		if err := (<-b).err; err == nil {
			t.Error("a claim without a lease succeeded")
		}
		synctest.Wait()
		g.open(t)
		if got := <-r; !errors.Is(got.err, idem.ErrKeyReused) || got.claim.Err != nil {
			t.Errorf("reused key: %+v, %v; want ErrKeyReused as the error", got.claim, got.err)
		}
		if got := <-ok; got.err != nil || got.claim.Outcome != storage.Acquired {
			t.Errorf("ok: %v, %v", got.claim.Outcome, got.err)
		}
		wantCalls(t, g, "Claim", "Claim", "ClaimBatch 2")
	})
}

// failingBatches is a memstore whose batches fail as a whole.
type failingBatches struct {
	*gatedStore
}

var errBatch = errors.New("the batch failed")

func (s failingBatches) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	s.gatedStore.ClaimBatch(ctx, args)
	return nil, errBatch
}

// An error of the batch as a whole goes to every caller in the batch.
func TestCoalesceBatchErrorGoesToAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGated(t)
		s := coalesce.New(failingBatches{g})
		bg := context.Background()
		first := claimAsync(bg, s, claimOf("first"))
		synctest.Wait()
		var queued []<-chan answer
		for i := range 3 {
			queued = append(queued, claimAsync(bg, s, claimOf(fmt.Sprint("k", i))))
		}
		synctest.Wait()
		g.open(t)
		g.open(t)
		<-first
		for i, ch := range queued {
			if got := <-ch; !errors.Is(got.err, errBatch) {
				t.Errorf("claim %d: %v, want the batch's error", i, got.err)
			}
		}
	})
}

// panickingBatches is a memstore whose ClaimBatch panics.
type panickingBatches struct {
	*gatedStore
}

func (s panickingBatches) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	s.gatedStore.ClaimBatch(ctx, args)
	panic(errBatch)
}

// A panic of the store's batch call does not end the process on the
// batch's goroutine: every caller in the batch panics with it on its own
// goroutine, where its recover catches it, and the store goes on.
func TestCoalesceBatchPanicReachesEveryCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGated(t)
		s := coalesce.New(panickingBatches{g})
		bg := context.Background()
		first := claimAsync(bg, s, claimOf("first"))
		synctest.Wait()
		recovered := make(chan any, 3)
		for i := range 3 {
			go func() {
				defer func() { recovered <- recover() }()
				s.Claim(bg, claimOf(fmt.Sprint("k", i)))
			}()
		}
		synctest.Wait()
		g.open(t)
		g.open(t)
		<-first
		for range 3 {
			r := <-recovered
			err, ok := r.(error)
			if !ok || !errors.Is(err, errBatch) || !strings.Contains(err.Error(), "panicked") {
				t.Errorf("a caller in the batch recovered %v, want the store's panic", r)
			}
		}
		// The pipe goes on: the next claim, alone, is answered.
		next := claimAsync(bg, s, claimOf("next"))
		synctest.Wait()
		g.open(t)
		if a := <-next; a.err != nil || a.claim.Outcome != storage.Acquired {
			t.Fatalf("claim after the panic: %v, %v", a.claim.Outcome, a.err)
		}
	})
}

// New passes MaxValueSize through, and wraps a store once.
func TestCoalescePassesThrough(t *testing.T) {
	m := newMem(t)
	s := coalesce.New(m)
	if s.MaxValueSize() != m.MaxValueSize() {
		t.Errorf("New's store has MaxValueSize %d, its store %d", s.MaxValueSize(), m.MaxValueSize())
	}
	if coalesce.New(s) != s {
		t.Error("New of a coalescing store wraps it again")
	}
	if coalesce.New(nil) != nil {
		t.Error("New(nil) is not nil")
	}
}

// A claim queued for a batch keeps nothing of its caller's bytes: the
// caller that gave up while its claim was in flight reuses them (as the
// Guard reuses its buffers), and the batch still claims, and releases, the
// key it was given.
func TestCoalesceQueuedClaimOwnsItsBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, s, first := holding(t)
		bg := context.Background()
		buf := []byte("lent-key")
		a := claimOf("")
		a.Key = unsafe.String(unsafe.SliceData(buf), len(buf))
		ctx, cancel := context.WithCancel(bg)
		queued := claimAsync(ctx, s, a)
		other := claimAsync(bg, s, claimOf("other"))
		synctest.Wait()
		g.open(t) // first's Claim
		<-first
		synctest.Wait()
		wantCalls(t, g, "Claim", "ClaimBatch 2")
		cancel() // gives up in flight
		if got := <-queued; !errors.Is(got.err, context.Canceled) {
			t.Fatalf("the caller gave up: %v, want context.Canceled", got.err)
		}
		copy(buf, "XXXX-XXX") // its bytes reused
		g.open(t)
		<-other
		synctest.Wait()
		if _, err := g.Get(bg, "XXXX-XXX"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("the batch claimed the bytes written after its caller gave up: %v", err)
		}
		rec, err := g.Get(bg, "lent-key")
		if err != nil || rec.Token != 0 {
			t.Errorf("the claim of the key the caller gave was not made and released: %+v, %v", rec, err)
		}
	})
}

// countingStore counts the calls that reach a memstore.
type countingStore struct {
	*memstore.Store
	claims, claimBatches, batched, completes, completeBatches atomic.Int64
}

func (s *countingStore) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, a)
}

func (s *countingStore) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	s.claimBatches.Add(1)
	s.batched.Add(int64(len(args)))
	return s.Store.ClaimBatch(ctx, args)
}

func (s *countingStore) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	s.completes.Add(1)
	return s.Store.Complete(ctx, key, t, value, retention)
}

func (s *countingStore) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	s.completeBatches.Add(1)
	return s.Store.CompleteBatch(ctx, cs)
}

// Many goroutines doing the same keys through a Guard over Coalesce: every
// key's fn runs once, and every other call replays its value.
func TestCoalesceGuardManyGoroutines(t *testing.T) {
	cs := &countingStore{Store: newMem(t)}
	idemtest.GuardManyGoroutines(t, coalesce.New(cs), 32, 200)
	t.Logf("store: %d Claim, %d ClaimBatch (%d claims), %d Complete, %d CompleteBatch",
		cs.claims.Load(), cs.claimBatches.Load(), cs.batched.Load(), cs.completes.Load(), cs.completeBatches.Load())
	if cs.claimBatches.Load() == 0 || cs.completeBatches.Load() == 0 {
		t.Log("no batch: the calls never overlapped")
	}
}

type callerKey struct{}

// The batch hook sees each batch, with its callers' contexts, wraps the
// context the store call runs under, and gets the call's error; a call
// made at once, with no queue, is no batch and runs under its caller's
// context.
func TestCoalesceBatchHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type seen struct {
			call    string
			callers []any
			err     error
		}
		var mu sync.Mutex
		var hooked []*seen
		type hookKey struct{}
		hook := func(ctx context.Context, call string, callers []context.Context) (context.Context, func(error)) {
			s := &seen{call: call}
			for _, c := range callers {
				s.callers = append(s.callers, c.Value(callerKey{}))
			}
			mu.Lock()
			hooked = append(hooked, s)
			mu.Unlock()
			return context.WithValue(ctx, hookKey{}, call), func(err error) { s.err = err }
		}
		g := newGated(t)
		s := coalesce.New(g, coalesce.WithBatchHook(hook))
		bg := context.Background()
		first := claimAsync(context.WithValue(bg, callerKey{}, "first"), s, claimOf("first"))
		synctest.Wait()
		a := claimAsync(context.WithValue(bg, callerKey{}, "a"), s, claimOf("a"))
		synctest.Wait()
		b := claimAsync(context.WithValue(bg, callerKey{}, "b"), s, claimOf("b"))
		synctest.Wait()
		g.open(t)
		<-first
		synctest.Wait()
		g.open(t)
		<-a
		<-b
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(hooked) != 1 || hooked[0].call != "ClaimBatch" || !slices.Equal(hooked[0].callers, []any{"a", "b"}) || hooked[0].err != nil {
			t.Fatalf("hook saw %+v, want one ClaimBatch of callers a and b, ended without error", hooked)
		}
		if len(g.batchCtx) != 1 || g.batchCtx[0].Value(hookKey{}) != "ClaimBatch" {
			t.Fatal("the batch's store call did not run under the hook's context")
		}
	})
}
