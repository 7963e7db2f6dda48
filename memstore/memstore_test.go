package memstore_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

func newStore(t *testing.T, cfg memstore.Config) *memstore.Store {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := memstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	shared := newStore(t, memstore.Config{})
	idemtest.Run(t, func(t *testing.T) storage.Store { return shared })
}

func TestFullStoreRefusesNewKeys(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newStore(t, memstore.Config{MaxEntries: 2, Now: func() time.Time { return now }})
	ctx := context.Background()
	a := func(k string) storage.ClaimArgs {
		return storage.ClaimArgs{Key: k, Fingerprint: nil, Lease: time.Second, Retention: time.Minute}
	}
	for _, k := range []string{"a", "b"} {
		if _, err := s.Claim(ctx, a(k)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Claim(ctx, a("c")); !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("third key in a store of 2: %v, want ErrFull", err)
	}
	if c, err := s.Claim(ctx, a("a")); err != nil || c.Outcome != storage.Busy {
		t.Fatalf("an existing key in a full store: %v %v, want Busy", c.Outcome, err)
	}
	// The Guard fails closed on a full store.
	g, _ := idem.New(s, idem.Config{})
	defer g.Close()
	if _, err := g.Do(ctx, "new", nil, func(context.Context) ([]byte, error) { return nil, nil }); !errors.Is(err, idem.ErrStoreUnavailable) || !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("Guard on a full store: %v, want ErrStoreUnavailable wrapping ErrFull", err)
	}
	// Once the records expire, the sweep frees room.
	now = now.Add(time.Hour)
	s.Sweep()
	if s.Len() != 0 {
		t.Fatalf("Len after sweeping expired records = %d, want 0", s.Len())
	}
	if _, err := s.Claim(ctx, a("c")); err != nil {
		t.Fatalf("claim after the sweep: %v", err)
	}
}

func TestExpiryFollowsTheInjectedClock(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newStore(t, memstore.Config{Now: func() time.Time { return now }})
	ctx := context.Background()
	a := storage.ClaimArgs{Key: "k", Fingerprint: []byte("fp"), Lease: time.Second, Retention: time.Minute}
	c, _ := s.Claim(ctx, a)
	if err := s.Complete(ctx, "k", c.Token, []byte("v"), time.Hour); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour - time.Nanosecond)
	if d, _ := s.Claim(ctx, a); d.Outcome != storage.Duplicate {
		t.Fatalf("just before retention ends: %v, want Duplicate", d.Outcome)
	}
	now = now.Add(time.Nanosecond)
	if d, _ := s.Claim(ctx, a); d.Outcome != storage.Acquired || d.Record.Attempt != 1 {
		t.Fatalf("when retention ends: %v attempt %d, want a new record", d.Outcome, d.Record.Attempt)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := memstore.New(memstore.Config{MaxEntries: -1}); err == nil || !strings.Contains(err.Error(), "MaxEntries") {
		t.Fatalf("negative MaxEntries: %v", err)
	}
	if _, err := memstore.New(memstore.Config{SweepInterval: -1}); err == nil || !strings.Contains(err.Error(), "SweepInterval") {
		t.Fatalf("negative SweepInterval: %v", err)
	}
	for _, n := range []int{-1, memstore.MaxValueSizeLimit + 1} {
		if _, err := memstore.New(memstore.Config{MaxValueSize: n}); err == nil || !strings.Contains(err.Error(), "Config.MaxValueSize") {
			t.Fatalf("MaxValueSize %d: %v", n, err)
		}
	}
}

// TestCloseIsIdempotent runs in a synctest bubble: a Close that blocked
// for good would be reported as a deadlock of the bubble, not hang the
// test, and the sweeper's schedule is the bubble's fake clock.
func TestCloseIsIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.Config{SweepInterval: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		expiring := func(key string) {
			t.Helper()
			if _, err := s.Claim(ctx, storage.ClaimArgs{Key: key, Lease: time.Second, Retention: time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		expiring("swept")
		time.Sleep(2 * time.Minute)
		if n := s.Len(); n != 0 {
			t.Fatalf("%d records two sweep intervals after they expired, want the sweeper to have removed them", n)
		}
		for i := range 2 {
			if err := s.Close(); err != nil {
				t.Fatalf("Close #%d: %v", i+1, err)
			}
		}
		// Closed, the store no longer sweeps, and keeps serving.
		expiring("kept")
		time.Sleep(10 * time.Minute)
		if n := s.Len(); n != 1 {
			t.Fatalf("%d records after Close and 10 sweep intervals, want the expired one kept: no sweeper runs", n)
		}
	})
	runtime.GC() // the Store's cleanup, outside the bubble, finds it closed
}

func TestUnreachableStoreStopsItsSweeper(t *testing.T) {
	func() { memstore.New(memstore.Config{}) }() // never closed
	deadline := time.Now().Add(5 * time.Second)
	for idemtest.Leaked("memstore.(*store).sweeper", 0) != "" {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper of an unreachable, unclosed Store is still running")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClaimOfAFinishedKeyAllocatesOnlyItsValue: a duplicate's claim is a
// read; its one allocation is the copy of the value it returns, and a Busy
// key's claim allocates nothing.
func TestClaimOfAFinishedKeyAllocatesOnlyItsValue(t *testing.T) {
	s := newStore(t, memstore.Config{})
	ctx := context.Background()
	fp := []byte("fingerprint")
	a := func(k string) storage.ClaimArgs {
		return storage.ClaimArgs{Key: k, Fingerprint: fp, Lease: time.Minute, Retention: time.Hour, MaxAttempts: 3}
	}
	c, err := s.Claim(ctx, a("done"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "done", c.Token, []byte("receipt"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, a("busy")); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]float64{"done": 1, "busy": 0} {
		args := a(key)
		got := testing.AllocsPerRun(1000, func() {
			if _, err := s.Claim(ctx, args); err != nil {
				t.Fatal(err)
			}
		})
		if got > want {
			t.Errorf("claim of the %s key: %v allocations, want %v", key, got, want)
		}
	}
}
