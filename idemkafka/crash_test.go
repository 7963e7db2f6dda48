package idemkafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/storage"
)

// cutStore is one member's connection to the shared store: once cut, the
// calls named in refuse fail, as they would from a crashed or partitioned
// process.
type cutStore struct {
	storage.Store
	cut    atomic.Bool
	refuse map[string]bool // "Complete", "Release", "Extend", …; nil: every call
}

var errCut = errors.New("test: this member is cut off from the store")

func (s *cutStore) refused(call string) bool {
	return s.cut.Load() && (s.refuse == nil || s.refuse[call])
}

func (s *cutStore) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if s.refused("Claim") {
		return storage.Claim{}, errCut
	}
	return s.Store.Claim(ctx, a)
}

// ClaimBatch and CompleteBatch go through Claim and Complete, so that a
// batch is cut off as its calls are.
func (s *cutStore) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	return storage.ClaimEach(ctx, s, args)
}

func (s *cutStore) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	return storage.CompleteEach(ctx, s, cs)
}

func (s *cutStore) Complete(ctx context.Context, key string, t storage.Token, v []byte, r time.Duration) error {
	if s.refused("Complete") {
		return errCut
	}
	return s.Store.Complete(ctx, key, t, v, r)
}

func (s *cutStore) Fail(ctx context.Context, key string, t storage.Token, c []byte, r time.Duration) error {
	if s.refused("Fail") {
		return errCut
	}
	return s.Store.Fail(ctx, key, t, c, r)
}

func (s *cutStore) Release(ctx context.Context, key string, t storage.Token) error {
	if s.refused("Release") {
		return errCut
	}
	return s.Store.Release(ctx, key, t)
}

func (s *cutStore) Extend(ctx context.Context, key string, t storage.Token, d time.Duration) error {
	if s.refused("Extend") {
		return errCut
	}
	return s.Store.Extend(ctx, key, t, d)
}

// blocker holds the handler of one key until released.
type blocker struct {
	key     string
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBlocker(key string) *blocker {
	return &blocker{key: key, started: make(chan struct{}), release: make(chan struct{})}
}

// hold blocks, ignoring ctx, if r is the blocker's record; it reports
// whether it did.
func (b *blocker) hold(r *kgo.Record) bool {
	if headerKey(r) != b.key {
		return false
	}
	b.once.Do(func() { close(b.started) })
	<-b.release
	return true
}

func (b *blocker) wait(t testing.TB) {
	t.Helper()
	select {
	case <-b.started:
	case <-time.After(groupTimeout):
		t.Fatalf("the handler of %s never started", b.key)
	}
}

func keyedRange(topic string, n int) ([]*kgo.Record, []string) {
	recs := make([]*kgo.Record, n)
	keys := make([]string, n)
	for i := range recs {
		keys[i] = fmt.Sprintf("k-%d", i)
		recs[i] = keyed(topic, 0, keys[i], keys[i])
	}
	return recs, keys
}

// A member dies in the middle of a handler: its client goes away without
// committing that record, and every store call it would make after is
// lost. Another member gets the record again and, once the dead member's
// lease ends, runs it: once.
func TestMemberKilledMidHandler(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 1})
	topic, group := c.Name("orders"), c.Name("payments")
	recs, keys := keyedRange(topic, 10)
	produce(t, c, recs...)
	shared := newMem(t)
	l := newLedger()
	b := newBlocker("k-5")
	defer close(b.release)

	deadStore := &cutStore{Store: shared}
	gA := newGuard(t, deadStore, idem.Config{Lease: time.Second})
	a := start(t, c, group, topic, gA, func(ctx context.Context, r *kgo.Record) error {
		if b.hold(r) {
			return errors.New("dead process") // never seen: its store calls fail
		}
		return l.handler(ctx, r)
	}, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithDrainTimeout(200*time.Millisecond))
	b.wait(t)
	// The records before k-5 ran in its batch; their values are stored
	// while k-5 runs (the batch's flush). The process dies after that:
	// a crash before it would run them again, as the window allows.
	await(t, groupTimeout, "the outcomes of the records before k-5", func() bool {
		for _, k := range keys[:5] {
			if rec, err := shared.Get(context.Background(), gA.StoreKey(k)); err != nil || rec.Status != storage.StatusCompleted {
				return false
			}
		}
		return true
	})
	deadStore.cut.Store(true) // the process is gone: no release, no heartbeat, no complete
	a.cl.Close()
	if err := a.stop(); !errors.Is(err, kgo.ErrClientClosed) {
		t.Fatalf("the dead member's Run: %v, want ErrClientClosed", err)
	}

	// B's own claims are not to be taken over: a lease a loaded machine
	// cannot outlast between heartbeats.
	gB := newGuard(t, shared, idem.Config{Lease: 30 * time.Second})
	var attempt atomic.Int32
	start(t, c, group, topic, gB, func(ctx context.Context, r *kgo.Record) error {
		if headerKey(r) == "k-5" {
			rec, err := shared.Get(ctx, gB.StoreKey("k-5"))
			if err != nil {
				return err
			}
			attempt.Store(int32(rec.Attempt))
		}
		return l.handler(ctx, r)
	}, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithRetryBackoff(20*time.Millisecond, 200*time.Millisecond))
	await(t, groupTimeout, "every key to be handled", func() bool { return l.count() == len(keys) })
	wantCommitted(t, c, group, topic)
	l.wantOnce(t, keys)
	if attempt.Load() != 2 {
		t.Fatalf("k-5 ran at attempt %d, want 2: taken over after the dead member's lease", attempt.Load())
	}
}

// fencedLedger applies an effect only for the key's current holder: the
// write carries the lease token and is refused for any other, as a
// database write conditioned on the token would be.
type fencedLedger struct {
	*ledger
	store  storage.Store
	g      func(key string) string // the key's store key
	fenced atomic.Int32
}

func (f *fencedLedger) handler(ctx context.Context, r *kgo.Record) error {
	k := headerKey(r)
	tok, _ := idem.TokenFrom(ctx)
	rec, err := f.store.Get(context.WithoutCancel(ctx), f.g(k))
	if err != nil {
		return err
	}
	if rec.Status != storage.StatusInProgress || rec.Token != tok {
		f.fenced.Add(1)
		return fmt.Errorf("fenced: token %d is not the current %d", tok, rec.Token)
	}
	f.enter(k)
	f.leave(k, true)
	return nil
}

// A member's handler stalls past its lease, which it cannot extend, while
// the partition moves to another member: that member takes the key over
// and runs it; the stalled handler's late effect is refused by its stale
// token, and its outcome by the store.
func TestStalledHandlerIsFenced(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 1})
	topic, group := c.Name("orders"), c.Name("payments")
	recs, keys := keyedRange(topic, 10)
	produce(t, c, recs...)
	shared := newMem(t)
	b := newBlocker("k-5")

	storeA := &cutStore{Store: shared, refuse: map[string]bool{"Extend": true}}
	gA := newGuard(t, storeA, idem.Config{Lease: time.Second}) // to run out: B takes k-5 over
	gB := newGuard(t, shared, idem.Config{Lease: 30 * time.Second})
	f := &fencedLedger{ledger: newLedger(), store: shared, g: gB.StoreKey}
	stalled := make(chan error, 1)
	a := start(t, c, group, topic, gA, func(ctx context.Context, r *kgo.Record) error {
		if b.hold(r) {
			err := f.handler(ctx, r) // wakes up late and tries anyway
			stalled <- err
			return err
		}
		return f.handler(ctx, r)
	}, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithDrainTimeout(200*time.Millisecond))
	b.wait(t)
	storeA.cut.Store(true) // its heartbeat fails from now on: the lease runs out

	// The partition moves: the stalled member leaves (its revoke gives up
	// on the handler after the drain timeout) and another takes over.
	start(t, c, group, topic, gB, f.handler, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithRetryBackoff(20*time.Millisecond, 200*time.Millisecond))
	a.cl.Close()
	await(t, groupTimeout, "the other member to handle every key", func() bool { return f.count() == len(keys) })
	close(b.release)
	if err := <-stalled; err == nil {
		t.Fatal("the stalled handler's late effect was applied")
	}
	f.wantOnce(t, keys)
	if f.fenced.Load() != 1 {
		t.Fatalf("%d writes fenced, want the stalled handler's one", f.fenced.Load())
	}
	if rec, err := shared.Get(context.Background(), gB.StoreKey("k-5")); err != nil || rec.Status != storage.StatusCompleted || rec.Attempt != 2 {
		t.Fatalf("k-5's record: %+v, %v; want Completed by the second holder", rec, err)
	}
	wantCommitted(t, c, group, topic)
}

// A partition revoked mid-handler: the handler's context is cancelled with
// ErrRevoked, its key is released, and the records finished before it are
// committed before the revoke completes, so that the new owner starts
// right at the interrupted record and runs it at once (the Guard's lease,
// ten minutes, would otherwise hold it).
func TestRevokeCancelsHandlersAndCommitsFirst(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 2})
	topic, group := c.Name("orders"), c.Name("payments")
	var recs []*kgo.Record
	for p := range int32(2) {
		for _, k := range []string{"0", "1", "block", "3"} {
			key := fmt.Sprintf("p%d-%s", p, k)
			recs = append(recs, keyed(topic, p, key, key))
		}
	}
	produce(t, c, recs...)
	store := newMem(t)
	l := newLedger()
	blocked := make(chan struct{}, 2)
	causes := make(chan error, 2)
	a := start(t, c, group, topic, newGuard(t, store, idem.Config{Lease: 10 * time.Minute}), func(ctx context.Context, r *kgo.Record) error {
		if strings.HasSuffix(headerKey(r), "-block") {
			blocked <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}
		return l.handler(ctx, r)
	}, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithDrainTimeout(time.Second))
	for range 2 {
		select {
		case <-blocked:
		case <-time.After(groupTimeout):
			t.Fatal("the first member's handlers never reached the blocking records")
		}
	}

	var mu sync.Mutex
	moved := int32(-1)
	var committedAtAssign int64
	start(t, c, group, topic, newGuard(t, store, idem.Config{Lease: 10 * time.Minute}), l.handler, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(),
		idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
			if e.Kind != idemkafka.EventAssigned {
				return
			}
			// On the consumer's goroutine: an error is noted, not fatal.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			committed, err := c.FetchCommitted(ctx, group, topic)
			if err != nil {
				t.Errorf("the committed offsets when the new owner got partition %d: %v", e.Partition, err)
			}
			mu.Lock()
			defer mu.Unlock()
			moved = e.Partition
			committedAtAssign = committed[e.Partition]
		}))
	select {
	case cause := <-causes:
		if !errors.Is(cause, idemkafka.ErrRevoked) {
			t.Fatalf("the revoked handler's context ended with %v, want ErrRevoked", cause)
		}
	case <-time.After(groupTimeout):
		t.Fatal("the handler of the revoked partition was not cancelled")
	}
	var keys []string
	await(t, groupTimeout, "the new owner to run the moved partition's records", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if moved < 0 {
			return false
		}
		keys = []string{fmt.Sprintf("p%d-0", moved), fmt.Sprintf("p%d-1", moved), fmt.Sprintf("p%d-block", moved), fmt.Sprintf("p%d-3", moved)}
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.effects[keys[2]] > 0 && l.effects[keys[3]] > 0
	})
	mu.Lock()
	if committedAtAssign != 2 {
		t.Errorf("partition %d: committed offset %d when the new owner got it, want 2 (the records before the interrupted one)", moved, committedAtAssign)
	}
	mu.Unlock()
	if err := a.stop(); err != nil {
		t.Fatalf("the first member's Run: %v", err)
	}
	kept := fmt.Sprintf("p%d-", 1-moved)
	l.wantOnce(t, append(keys, kept+"0", kept+"1"))
}
