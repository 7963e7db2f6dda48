package dynamostore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/storage"
)

// The tests here are two hosts sharing a table, each a Store whose clock
// (Config.Now) reads one settable true time plus the host's offset. The
// true time only moves when the test moves it: no test sleeps.

const skew = 2 * time.Second // Config.MaxClockSkew of both hosts

// hosts returns the true clock and two stores on one new table: a on the
// true time, b offset from it.
func hosts(t *testing.T, offset time.Duration) (*clock, *dynamostore.Store, *dynamostore.Store) {
	clk := newClock()
	c := dynamostoretest.Client(t)
	table := dynamostoretest.Table(t, c)
	a := dynamostoretest.Store(t, c, dynamostore.Config{Table: table, MaxClockSkew: skew, Now: clk.now})
	b := dynamostoretest.Store(t, c, dynamostore.Config{Table: table, MaxClockSkew: skew, Now: clk.skewed(offset)})
	return clk, a, b
}

// Within the margin, in either direction, a lease taken on one host is
// respected by the other until it has ended in true time, and a stored
// outcome until its retention has passed.
func TestClockSkewWithinMargin(t *testing.T) {
	for _, offset := range []time.Duration{skew - time.Millisecond, -skew + time.Millisecond} {
		t.Run(offset.String(), func(t *testing.T) {
			t.Parallel()
			clk, a, b := hosts(t, offset)
			ctx := ctxT(t)
			lease := 10 * time.Second
			k := args("k", lease)
			start := clk.now()
			held := mustClaim(t, a, k, storage.Acquired)
			for _, at := range []time.Duration{0, lease / 2, lease - time.Millisecond, lease} {
				clk.set(start.Add(at))
				mustClaim(t, b, k, storage.Busy)
			}
			// The other host takes over only once the lease has ended in
			// true time (by more when its clock is behind).
			clk.set(start.Add(lease + skew - offset + time.Millisecond))
			took := mustClaim(t, b, k, storage.Acquired)
			if err := a.Complete(ctx, k.Key, held.Token, []byte("stale"), time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("the displaced holder's Complete: %v, want ErrLeaseLost", err)
			}

			// B's outcome, kept ten seconds, is the answer on both hosts until the ten
			// seconds have passed in true time.
			retention := 10 * time.Second
			if err := b.Complete(ctx, k.Key, took.Token, []byte("v"), retention); err != nil {
				t.Fatal(err)
			}
			stored := clk.now()
			for _, host := range []*dynamostore.Store{a, b} {
				clk.set(stored.Add(retention))
				mustClaim(t, host, k, storage.Duplicate)
			}
		})
	}
}

// Beyond the margin the failure is the documented one: a host whose clock
// is ahead by more than MaxClockSkew sees a lease end early and takes the
// key over while its holder still runs, so the operation runs twice at
// once. Fencing still holds: the displaced holder cannot store its
// outcome, and every duplicate gets the new holder's.
func TestClockSkewBeyondMargin(t *testing.T) {
	offset := skew + 2*time.Second
	clk, a, b := hosts(t, offset)
	lease := 30 * time.Second
	guard := func(s storage.Store) *idem.Guard {
		return idemtest.Guard(t, s, idem.Config{Namespace: "charges", Lease: lease})
	}
	ga, gb := guard(a), guard(b)
	start := clk.now()

	var running, most atomic.Int32
	run := func(value string, proceed <-chan struct{}) func(context.Context) ([]byte, error) {
		return func(ctx context.Context) ([]byte, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			select {
			case <-proceed:
				return []byte(value), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	aRuns, aDone := make(chan struct{}), make(chan error, 1)
	aProceed := make(chan struct{})
	go func() {
		_, err := ga.Do(context.Background(), "order-1", []byte("charge"), func(ctx context.Context) ([]byte, error) {
			close(aRuns)
			return run("a", aProceed)(ctx)
		})
		aDone <- err
	}()
	<-aRuns

	// One second before A's lease ends in true time, B's clock reads three
	// seconds past it: one more than the margin.
	clk.set(start.Add(lease - time.Second))
	bProceed := make(chan struct{})
	close(bProceed)
	res, err := gb.Do(ctxT(t), "order-1", []byte("charge"), run("b", bProceed))
	if err != nil || string(res.Value) != "b" || res.Replayed {
		t.Fatalf("B's Do during A's lease, clocks %v apart: %+v, %v; want B to take over and run (the documented failure)", offset, res, err)
	}
	if most.Load() != 2 {
		t.Fatalf("at most %d holders ran at once, want 2: the failure beyond the margin did not show", most.Load())
	}
	close(aProceed)
	if err := <-aDone; !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("A's Do after B took over: %v, want ErrLeaseLost (its outcome refused)", err)
	}
	res, err = ga.Do(ctxT(t), "order-1", []byte("charge"), run("again", bProceed))
	if err != nil || string(res.Value) != "b" || !res.Replayed {
		t.Fatalf("a duplicate on A: %+v, %v; want B's stored outcome replayed", res, err)
	}
}

// The same two Guards, clocks a millisecond less than the margin apart,
// never run the operation twice at once: B is turned away until A's lease
// has ended in true time.
func TestClockSkewWithinMarginGuards(t *testing.T) {
	offset := skew - time.Millisecond
	clk, a, b := hosts(t, offset)
	lease := 30 * time.Second
	ga := idemtest.Guard(t, a, idem.Config{Namespace: "charges", Lease: lease})
	gb := idemtest.Guard(t, b, idem.Config{Namespace: "charges", Lease: lease})
	start := clk.now()

	aRuns, aProceed, aDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := ga.Do(context.Background(), "order-1", []byte("charge"), func(ctx context.Context) ([]byte, error) {
			close(aRuns)
			select {
			case <-aProceed:
				return []byte("a"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		aDone <- err
	}()
	<-aRuns
	var bRan atomic.Bool
	for _, at := range []time.Duration{0, lease - time.Second, lease} {
		clk.set(start.Add(at))
		_, err := gb.Do(ctxT(t), "order-1", []byte("charge"), func(context.Context) ([]byte, error) {
			bRan.Store(true)
			return []byte("b"), nil
		})
		if !errors.Is(err, idem.ErrInProgress) || bRan.Load() {
			t.Fatalf("B's Do %v into A's lease: %v (ran: %v), want ErrInProgress", at, err, bRan.Load())
		}
	}
	close(aProceed)
	if err := <-aDone; err != nil {
		t.Fatalf("A's Do: %v", err)
	}
	res, err := gb.Do(ctxT(t), "order-1", []byte("charge"), func(context.Context) ([]byte, error) { return []byte("b"), nil })
	if err != nil || string(res.Value) != "a" || !res.Replayed {
		t.Fatalf("B after A finished: %+v, %v; want A's outcome replayed", res, err)
	}
}
