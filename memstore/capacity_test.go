package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

// fakeClock is a store clock the test moves by hand.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func args(key string) storage.ClaimArgs {
	return storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Hour}
}

// finished claims key and completes it with value.
func finished(t *testing.T, s *memstore.Store, key string, value []byte) {
	t.Helper()
	c, err := s.Claim(context.Background(), args(key))
	if err != nil || c.Outcome != storage.Acquired {
		t.Fatalf("Claim(%q): %v %v, want Acquired", key, c.Outcome, err)
	}
	if err := s.Complete(context.Background(), key, c.Token, value, time.Hour); err != nil {
		t.Fatalf("Complete(%q): %v", key, err)
	}
}

func mustAcquire(t *testing.T, s *memstore.Store, a storage.ClaimArgs) storage.Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), a)
	if err != nil || c.Outcome != storage.Acquired {
		t.Fatalf("Claim(%q): %v %v, want Acquired", a.Key, c.Outcome, err)
	}
	return c
}

// held reports which of keys the store still has a record of.
func held(s *memstore.Store, keys ...string) string {
	var have []string
	for _, k := range keys {
		if _, err := s.Get(context.Background(), k); err == nil {
			have = append(have, k)
		}
	}
	return strings.Join(have, " ")
}

// TestFullStoreEvictsTheOldestFinished: a store full of records makes room
// for a new key by evicting the record finished first, not by refusing
// everyone until records expire; it refuses only when every record is in
// progress.
func TestFullStoreEvictsTheOldestFinished(t *testing.T) {
	clock := newClock()
	s := newStore(t, memstore.Config{MaxEntries: 3, Now: clock.now})
	for _, k := range []string{"c", "a", "b"} { // claimed and finished in this order
		finished(t, s, k, []byte("v"))
		clock.advance(time.Second)
	}
	mustAcquire(t, s, args("d"))
	if got := held(s, "a", "b", "c", "d"); got != "a b d" {
		t.Fatalf("after a claim in a full store the records are %q, want %q (c, finished first, evicted)", got, "a b d")
	}
	mustAcquire(t, s, args("e"))
	mustAcquire(t, s, args("f"))
	if got := held(s, "a", "b", "d", "e", "f"); got != "d e f" {
		t.Fatalf("records %q, want %q", got, "d e f")
	}
	// Nothing can go now: every record is in progress.
	if _, err := s.Claim(context.Background(), args("g")); !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("a claim in a store full of records in progress: %v, want ErrFull", err)
	}
	if c, err := s.Claim(context.Background(), args("d")); err != nil || c.Outcome != storage.Busy {
		t.Fatalf("a key the full store holds: %v %v, want Busy", c.Outcome, err)
	}
}

// TestByteCapEvictsTheOldestFinished: the records' bytes are capped
// beside their number, and an outcome that does not fit evicts too.
func TestByteCapEvictsTheOldestFinished(t *testing.T) {
	clock := newClock()
	const value = 1000
	record := memstore.EntryOverhead + 1 + value // a one-byte key, a short fingerprint, the value
	maxBytes := 3*record + 100
	s := newStore(t, memstore.Config{MaxBytes: maxBytes, MaxValueSize: value, Now: clock.now})
	for _, k := range []string{"a", "b", "c"} {
		finished(t, s, k, bytes.Repeat([]byte(k), value))
		clock.advance(time.Second)
	}
	if s.Bytes() != 3*record {
		t.Fatalf("Bytes() = %d, want %d", s.Bytes(), 3*record)
	}
	d := mustAcquire(t, s, args("d")) // one more small record: a goes
	mustAcquire(t, s, args("e"))      // fits
	if got := held(s, "a", "b", "c", "d", "e"); got != "b c d e" {
		t.Fatalf("records %q, want %q", got, "b c d e")
	}
	if err := s.Complete(context.Background(), "d", d.Token, bytes.Repeat([]byte("d"), value), time.Hour); err != nil {
		t.Fatalf("Complete that needs room: %v", err)
	}
	if got := held(s, "b", "c", "d", "e"); got != "c d e" {
		t.Fatalf("records %q, want %q (b evicted for d's value)", got, "c d e")
	}
	if want := 2*record + memstore.EntryOverhead + 1; s.Bytes() != want {
		t.Fatalf("Bytes() = %d, want %d", s.Bytes(), want)
	}

	// An outcome that cannot fit, nothing being evictable, is refused and
	// changes nothing: the holder still holds its claim.
	s = newStore(t, memstore.Config{MaxBytes: 2 * record, MaxValueSize: value, Now: clock.now})
	x := mustAcquire(t, s, args("x"))
	big := args("big")
	big.Fingerprint = make([]byte, 1500) // counted: longer than a SHA-256
	mustAcquire(t, s, big)
	err := s.Complete(context.Background(), "x", x.Token, bytes.Repeat([]byte("x"), value), time.Hour)
	if !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("Complete with nothing to evict: %v, want ErrFull", err)
	}
	if r, err := s.Get(context.Background(), "x"); err != nil || r.Status != storage.StatusInProgress || r.Token != x.Token {
		t.Fatalf("after a refused outcome: %+v %v, want x still in progress", r, err)
	}
}

// TestReleasedRecordsGoFirst: a released record whose claim had no attempt
// cap holds nothing a retry needs, so it is evicted before any outcome; one
// released under a cap goes next (its attempt count starts again), and
// outcomes last.
func TestReleasedRecordsGoFirst(t *testing.T) {
	clock := newClock()
	s := newStore(t, memstore.Config{MaxEntries: 3, Now: clock.now})
	ctx := context.Background()
	finished(t, s, "done", []byte("v"))
	clock.advance(time.Second)
	free := mustAcquire(t, s, args("free"))
	capped := args("capped")
	capped.MaxAttempts = 5
	c := mustAcquire(t, s, capped)
	if err := s.Release(ctx, "capped", c.Token); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "free", free.Token); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, args("n1"))
	if got := held(s, "done", "free", "capped", "n1"); got != "done capped n1" {
		t.Fatalf("records %q, want %q (the released record first, though done finished and capped was released before)", got, "done capped n1")
	}
	mustAcquire(t, s, args("n2"))
	if got := held(s, "done", "capped", "n1", "n2"); got != "done n1 n2" {
		t.Fatalf("records %q, want %q (the capped released record before the outcome)", got, "done n1 n2")
	}
	if again := mustAcquire(t, s, capped); again.Record.Attempt != 1 {
		t.Fatalf("the evicted capped record's next claim: attempt %d, want 1 (its count started again)", again.Record.Attempt)
	}
	if got := held(s, "done", "capped", "n1", "n2"); got != "capped n1 n2" {
		t.Fatalf("records %q, want %q (the outcome last)", got, "capped n1 n2")
	}
	if _, err := s.Claim(ctx, args("n3")); !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("with every record in progress: %v, want ErrFull", err)
	}
}

// TestAttemptCapIsNoOutage: under a Guard with MaxAttempts, an attacker's
// keys whose operations fail leave records released under a cap; once they
// fill the store, another tenant's new key is still claimed. They were
// never evictable, and every new key got ErrFull until FailedRetention
// passed.
func TestAttemptCapIsNoOutage(t *testing.T) {
	s := newStore(t, memstore.Config{MaxEntries: 100})
	g, err := idem.New(s, idem.Config{MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := context.Background()
	failing := func(context.Context) ([]byte, error) { return nil, errors.New("rejected") }
	for i := range 2000 {
		if _, err := g.DoScoped(ctx, "attacker", fmt.Sprintf("k%d", i), nil, failing); err == nil || errors.Is(err, memstore.ErrFull) {
			t.Fatalf("attacker key %d: %v, want the operation's error", i, err)
		}
	}
	res, err := g.DoScoped(ctx, "victim", "order-1", nil, func(context.Context) ([]byte, error) { return []byte("ok"), nil })
	if err != nil || string(res.Value) != "ok" {
		t.Fatalf("another tenant's new key in a store full of capped released records: %q, %v", res.Value, err)
	}
}

// TestEvictionsAreObservedAndLogged: every eviction reaches OnEvict; the
// log gets a warning at once and then at most one a minute, counting what
// happened since.
func TestEvictionsAreObservedAndLogged(t *testing.T) {
	clock := newClock()
	var mu sync.Mutex
	var seen []memstore.Eviction
	var log bytes.Buffer
	s := newStore(t, memstore.Config{
		MaxEntries: 2,
		Now:        clock.now,
		OnEvict: func(ev memstore.Eviction) {
			mu.Lock()
			seen = append(seen, ev)
			mu.Unlock()
		},
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
	})
	finished(t, s, "k0", []byte("value"))
	for i := 1; i <= 4; i++ {
		if i == 4 {
			clock.advance(time.Minute)
		}
		finished(t, s, fmt.Sprintf("k%d", i), []byte("value"))
	}
	// k0, k1 and k2 were evicted, for k2, k3 and k4.
	want := []memstore.Eviction{
		{Key: "k0", Status: storage.StatusCompleted, Bytes: memstore.EntryOverhead + 2 + 5},
		{Key: "k1", Status: storage.StatusCompleted, Bytes: memstore.EntryOverhead + 2 + 5},
		{Key: "k2", Status: storage.StatusCompleted, Bytes: memstore.EntryOverhead + 2 + 5},
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("OnEvict saw %v, want %v", seen, want)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "evicted=1") ||
		!strings.Contains(lines[1], "evicted=2") {
		t.Fatalf("log:\n%s\nwant two warnings: the first eviction at once, the next two a minute later", log.String())
	}
}

// TestExpiredRecordsMakeRoomUnreported: records that expired are removed
// to make room, and are not evictions.
func TestExpiredRecordsMakeRoomUnreported(t *testing.T) {
	clock := newClock()
	var evictions atomic.Int32
	s := newStore(t, memstore.Config{MaxEntries: 2, Now: clock.now, OnEvict: func(memstore.Eviction) { evictions.Add(1) }})
	abandoned := args("abandoned") // claimed, never finished: in no eviction queue
	abandoned.Lease, abandoned.Retention = time.Second, time.Minute
	mustAcquire(t, s, abandoned)
	finished(t, s, "done", []byte("v"))
	clock.advance(2 * time.Hour) // both expired, neither swept
	mustAcquire(t, s, args("n1"))
	mustAcquire(t, s, args("n2"))
	if evictions.Load() != 0 || s.Len() != 2 {
		t.Fatalf("%d evictions reported, %d records; want 0 and 2: expired records are not evictions", evictions.Load(), s.Len())
	}
}

// TestSweepDropsQueuedRecordsThatAreGone: the eviction queues do not grow
// with records that were deleted or expired.
func TestSweepDropsQueuedRecordsThatAreGone(t *testing.T) {
	clock := newClock()
	s := newStore(t, memstore.Config{Now: clock.now})
	for i := range 100 {
		finished(t, s, fmt.Sprint(i), []byte("v"))
	}
	for i := range 50 {
		s.Delete(context.Background(), fmt.Sprint(i))
	}
	if n := s.QueuedVictims(); n != 100 {
		t.Fatalf("%d queued before the sweep, want 100", n)
	}
	s.Sweep()
	if n := s.QueuedVictims(); n != 50 {
		t.Fatalf("%d queued after the sweep, want the 50 records still held", n)
	}
	clock.advance(2 * time.Hour)
	s.Sweep()
	if n := s.QueuedVictims(); n != 0 || s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("after they expired: %d queued, %d records, %d bytes; want none", n, s.Len(), s.Bytes())
	}
}

// TestCapsHoldUnderConcurrency: many goroutines claiming, completing,
// releasing and deleting in a store that is always full never take it
// over either cap, and its byte count stays exact.
func TestCapsHoldUnderConcurrency(t *testing.T) {
	const (
		keys       = 400
		maxEntries = 100
		maxBytes   = 60_000
	)
	s := newStore(t, memstore.Config{MaxEntries: maxEntries, MaxBytes: maxBytes, MaxValueSize: 2000})
	ctx := context.Background()
	var over atomic.Int32
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 500 {
				key := fmt.Sprint(rng.IntN(keys))
				c, err := s.Claim(ctx, args(key))
				if err != nil && !errors.Is(err, memstore.ErrFull) {
					t.Errorf("Claim: %v", err)
					return
				}
				if err == nil && c.Outcome == storage.Acquired {
					switch rng.IntN(4) {
					case 0:
						s.Release(ctx, key, c.Token)
					case 1:
						s.Delete(ctx, key)
					default:
						err := s.Complete(ctx, key, c.Token, make([]byte, rng.IntN(2000)), time.Hour)
						if err != nil && !errors.Is(err, memstore.ErrFull) && !errors.Is(err, idem.ErrLeaseLost) {
							t.Errorf("Complete: %v", err)
						}
					}
				}
				if s.Len() > maxEntries || s.Bytes() > maxBytes {
					over.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if over.Load() > 0 {
		t.Fatalf("the store went over its caps %d times", over.Load())
	}
	var n, size int
	for k := range keys {
		key := fmt.Sprint(k)
		if r, err := s.Get(ctx, key); err == nil {
			n++
			size += memstore.EntryOverhead + len(key) + len(r.Result)
		}
	}
	if n != s.Len() || size != s.Bytes() {
		t.Fatalf("the store holds %d records of %d bytes, and counts %d of %d", n, size, s.Len(), s.Bytes())
	}
}

// TestFullStoreNeverRefusesWhatItCanEvict: at its cap, under a stream of
// new keys from many goroutines, every claim and every outcome finds room,
// since all but the few records in progress are finished and evictable.
// Concurrent evictions once raced: a caller's freed room was taken by
// another before its retry, and 1–2% of claims failed with ErrFull.
func TestFullStoreNeverRefusesWhatItCanEvict(t *testing.T) {
	const (
		workers    = 64
		perWorker  = 2000
		maxEntries = 1000
	)
	s := newStore(t, memstore.Config{MaxEntries: maxEntries})
	ctx := context.Background()
	var full atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				key := fmt.Sprintf("w%d-%d", w, i)
				c, err := s.Claim(ctx, args(key))
				if err != nil {
					if errors.Is(err, memstore.ErrFull) {
						full.Add(1)
						continue
					}
					t.Errorf("Claim(%q): %v", key, err)
					return
				}
				if c.Outcome != storage.Acquired {
					t.Errorf("Claim(%q) of a new key: %v", key, c.Outcome)
					return
				}
				if err := s.Complete(ctx, key, c.Token, []byte("done"), time.Hour); err != nil {
					if errors.Is(err, memstore.ErrFull) {
						full.Add(1)
						continue
					}
					t.Errorf("Complete(%q): %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := full.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed with ErrFull, with at most %d of %d records in progress", n, 2*workers*perWorker, workers, maxEntries)
	}
	if s.Len() > maxEntries {
		t.Fatalf("%d records held, over MaxEntries %d", s.Len(), maxEntries)
	}
}

// TestBatchEntryErrorsAreTheirOwn: at the cap, with nothing to evict, a
// ClaimBatch claims what fits and answers the rest ErrFull each: it once
// failed as a whole after claiming the entries before the one that did
// not fit, whose callers then got an error for keys left in progress.
func TestBatchEntryErrorsAreTheirOwn(t *testing.T) {
	s := newStore(t, memstore.Config{MaxEntries: 2})
	ctx := context.Background()
	mustAcquire(t, s, args("held"))
	got, err := s.ClaimBatch(ctx, []storage.ClaimArgs{args("a"), args("b")})
	if err != nil {
		t.Fatalf("ClaimBatch: %v, want each entry's answer", err)
	}
	if got[0].Err != nil || got[0].Outcome != storage.Acquired {
		t.Fatalf("the entry that fits: %v %v, want Acquired", got[0].Outcome, got[0].Err)
	}
	if !errors.Is(got[1].Err, memstore.ErrFull) {
		t.Fatalf("the entry that does not fit: %v, want ErrFull", got[1].Err)
	}
	errs, err := s.CompleteBatch(ctx, []storage.Completion{
		{Key: "a", Token: got[0].Token, Value: []byte("v"), Retention: time.Hour},
		{Key: "b", Token: 1, Value: []byte("v"), Retention: time.Hour},
	})
	if err != nil || errs[0] != nil || !errors.Is(errs[1], idem.ErrLeaseLost) {
		t.Fatalf("CompleteBatch: %v, %v; want the first stored and the second's own ErrLeaseLost", errs, err)
	}
}
