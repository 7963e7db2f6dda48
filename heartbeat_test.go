package idem

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The heartbeat alone, driven through a fake leaseKeeper inside synctest
// bubbles. Time there is the bubble's fake clock, which moves only when
// every goroutine of the bubble waits: a time.Sleep returns at once, with
// the clock moved on, and each assertion on when a heartbeat ran is exact.
// No test here waits on real time.

const (
	testLease        = 30 * time.Second
	testStoreTimeout = 5 * time.Second
)

// fakeKeeper records the heartbeat's calls. extend, when set, answers
// them; otherwise every extend succeeds at once.
type fakeKeeper struct {
	extend func(ctx context.Context, c *call) error

	mu      sync.Mutex
	extends []extendCall
	losses  map[*call]loss
	lost    chan *call // receives each call as it is lost
}

type extendCall struct {
	c        *call
	at       time.Time
	deadline time.Time // of the extend's context
}

type loss struct {
	at    time.Time
	cause error
}

func (k *fakeKeeper) extendLease(ctx context.Context, c *call) error {
	deadline, _ := ctx.Deadline()
	k.mu.Lock()
	k.extends = append(k.extends, extendCall{c: c, at: time.Now(), deadline: deadline})
	k.mu.Unlock()
	if k.extend != nil {
		return k.extend(ctx, c)
	}
	return nil
}

func (k *fakeKeeper) loseLease(c *call, cause error) {
	k.mu.Lock()
	if _, dup := k.losses[c]; dup {
		panic("a call's lease was lost twice")
	}
	k.losses[c] = loss{at: time.Now(), cause: cause}
	k.mu.Unlock()
	k.lost <- c
}

// extendsOf returns when c's lease was extended; every call's when c is
// nil.
func (k *fakeKeeper) extendsOf(c *call) []time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	var at []time.Time
	for _, e := range k.extends {
		if c == nil || e.c == c {
			at = append(at, e.at)
		}
	}
	return at
}

func (k *fakeKeeper) lossOf(c *call) (loss, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.losses[c]
	return l, ok
}

// newHeartbeats returns heartbeats keeping testLease leases through a
// fake keeper, closed when the test ends. Call it inside a bubble.
func newHeartbeats(t *testing.T, extend func(ctx context.Context, c *call) error) (*heartbeats, *fakeKeeper) {
	k := &fakeKeeper{extend: extend, losses: map[*call]loss{}, lost: make(chan *call, 100)}
	h := &heartbeats{}
	h.setup(k, testLease, testStoreTimeout)
	t.Cleanup(h.close)
	return h, k
}

// begin queues a new call as claimed now.
func begin(t *testing.T, h *heartbeats) *call {
	t.Helper()
	c := &call{}
	if err := h.start(c, time.Now()); err != nil {
		t.Fatalf("start: %v", err)
	}
	return c
}

func (h *heartbeats) isRunning() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running
}

func TestHeartbeatExtendsEveryThirdOfALease(t *testing.T) {
	for _, tc := range []struct {
		name string
		idle time.Duration // a call that finishes at once, then this long without calls
	}{
		{"first call", 0},
		// The loop sleeps an interval at a time when it has nothing to do:
		// a call that starts mid-sleep falls due after the loop wakes, and
		// must be extended on time all the same.
		{"after a pause mid-interval", testLease / 6},
		{"after the loop exited", 2 * testLease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, k := newHeartbeats(t, nil)
				if tc.idle > 0 {
					h.stop(begin(t, h))
					time.Sleep(tc.idle)
					if exited := !h.isRunning(); exited != (tc.idle >= h.lease) {
						t.Fatalf("after %v idle, the loop has exited = %v; want it to exit after a lease without calls", tc.idle, exited)
					}
				}
				start := time.Now()
				c := begin(t, h)
				time.Sleep(3*testLease + testLease/6)
				h.stop(c)
				at := k.extendsOf(c)
				if len(at) != 9 {
					t.Fatalf("%d extends in 3 leases, want 9: %v", len(at), at)
				}
				for i, a := range at {
					if want := start.Add(time.Duration(i+1) * testLease / 3); !a.Equal(want) {
						t.Errorf("extend %d at %v, want %v (every third of a lease from the claim)", i, a.Sub(start), want.Sub(start))
					}
				}
				if _, lost := k.lossOf(c); lost {
					t.Error("a call whose extends succeed lost its lease")
				}
			})
		})
	}
}

func TestHeartbeatLeavesCallsThatFinishFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, k := newHeartbeats(t, nil)
		for range 1000 {
			h.stop(begin(t, h))
		}
		// Two leases later the loop has had its chance to extend them, and
		// has exited for want of calls.
		time.Sleep(2 * testLease)
		if n := len(k.extendsOf(nil)) + len(k.losses); n != 0 {
			t.Errorf("%d extends or losses of calls that had finished, want none", n)
		}
		if h.isRunning() {
			t.Error("the loop still runs two leases after the last call")
		}
	})
}

func TestHeartbeatRetriesUntilTheLocalDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := errors.New("connection refused")
		h, k := newHeartbeats(t, func(context.Context, *call) error { return down })
		start := time.Now()
		c := begin(t, h)
		<-k.lost
		l, _ := k.lossOf(c)
		if l.cause != errLocalDeadline {
			t.Errorf("cause %v, want the local deadline", l.cause)
		}
		if want := start.Add(testLease - h.margin); !l.at.Equal(want) || !l.at.Before(start.Add(testLease)) {
			t.Errorf("lost at %v, want at the local deadline %v, before the lease ends at %v", l.at.Sub(start), want.Sub(start), testLease)
		}
		// From the first due time to the deadline, one try every retry pause.
		if n, want := len(k.extendsOf(c)), int((testLease-h.margin-h.interval)/h.retry); n < want {
			t.Errorf("%d extends before giving up, want at least %d", n, want)
		}
	})
}

func TestHeartbeatStopsWhenTheStoreSaysLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, k := newHeartbeats(t, func(context.Context, *call) error { return ErrLeaseLost })
		start := time.Now()
		c := begin(t, h)
		<-k.lost
		l, _ := k.lossOf(c)
		if l.cause != errDisplaced || !l.at.Equal(start.Add(h.interval)) {
			t.Errorf("lost at %v with %v, want at the first heartbeat (%v) with errDisplaced", l.at.Sub(start), l.cause, h.interval)
		}
		if n := len(k.extendsOf(c)); n != 1 {
			t.Errorf("%d extends, want 1: a lost lease is not retried", n)
		}
	})
}

func TestHeartbeatBoundsAHangingExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, k := newHeartbeats(t, func(ctx context.Context, _ *call) error {
			<-ctx.Done()
			return ctx.Err()
		})
		start := time.Now()
		c := begin(t, h)
		<-k.lost
		l, _ := k.lossOf(c)
		leaseEnd := start.Add(testLease)
		if l.cause != errLocalDeadline || !l.at.Before(leaseEnd) {
			t.Errorf("lost at %v with %v, want errLocalDeadline before the lease ends (%v)", l.at.Sub(start), l.cause, testLease)
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, e := range k.extends {
			if e.deadline.Sub(e.at) > testStoreTimeout || e.deadline.After(start.Add(testLease-h.margin)) {
				t.Errorf("an extend sent at %v could run until %v: past StoreTimeout or the local deadline", e.at.Sub(start), e.deadline.Sub(start))
			}
		}
	})
}

func TestHeartbeatCloseLosesRunningCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inFlight := make(chan struct{})
		release := make(chan struct{})
		first := &call{} // its extend is in flight at Close
		h, k := newHeartbeats(t, func(_ context.Context, c *call) error {
			if c == first {
				close(inFlight)
				<-release
			}
			return nil
		})
		if err := h.start(first, time.Now()); err != nil {
			t.Fatal(err)
		}
		<-inFlight
		queued := begin(t, h) // waiting for its first heartbeat at Close
		finished := begin(t, h)
		h.stop(finished)

		closed := make(chan struct{})
		go func() {
			h.close()
			close(closed)
		}()
		if got := <-k.lost; got != queued {
			t.Errorf("the first call lost at Close is not the queued one")
		}
		close(release)
		<-closed
		h.close() // idempotent: returns at once
		for name, c := range map[string]*call{"in flight": first, "queued": queued} {
			if l, ok := k.lossOf(c); !ok || !errors.Is(l.cause, ErrClosed) {
				t.Errorf("%s call: lost %v with %v, want lost with ErrClosed", name, ok, l.cause)
			}
		}
		if _, ok := k.lossOf(finished); ok {
			t.Error("a call that had finished was cancelled at Close")
		}
		if err := h.start(&call{}, time.Now()); !errors.Is(err, ErrClosed) {
			t.Errorf("start after Close: %v, want ErrClosed", err)
		}
	})
}
