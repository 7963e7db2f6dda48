package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem/outbox"
)

// ErrDown is what a [Recorder] that is down fails every message with,
// wrapped with outbox.Unavailable: the broker could not be reached, which
// charges no message an attempt.
var ErrDown = errors.New("outboxtest: broker down")

// Recorder is an in-memory [outbox.Publisher] that keeps what it was given,
// in order, and fails on demand. It is safe for concurrent use, so several
// relays may share one: what it holds is then the broker's order.
type Recorder struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	msgs    []outbox.Message
	calls   int
	down    bool
	// fail, when set, fails the messages it returns an error for.
	fail func(outbox.Message) error
	// before, when set, runs before every Publish.
	before func(ctx context.Context, msgs []outbox.Message)
}

// NewRecorder returns an empty Recorder that accepts everything.
func NewRecorder() *Recorder { return &Recorder{changed: make(chan struct{})} }

// Publish records msgs, but for those that fail: every one while the
// Recorder is down, and those FailWith's function refuses. A message
// refused fails its call's later messages of the same key too, as a
// publisher must (see outbox.Publisher), with an error that wraps
// outbox.ErrHeldBack and the failure, as outbox.PublishInRounds does.
func (r *Recorder) Publish(ctx context.Context, msgs []outbox.Message) error {
	r.mu.Lock()
	before := r.before
	r.mu.Unlock()
	if before != nil {
		before(ctx, msgs)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.notify()
	r.calls++
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.down {
		return outbox.Unavailable(ErrDown)
	}
	errs := make([]error, len(msgs))
	failedKeys := map[string]error{}
	for i, m := range msgs {
		if err, ok := failedKeys[m.Key]; ok && m.Key != "" {
			if p, ok := err.(*outbox.PermanentError); ok {
				err = p.Err // this message may well pass
			}
			errs[i] = fmt.Errorf("%w: %w", outbox.ErrHeldBack, err)
			continue
		}
		if r.fail != nil {
			if errs[i] = r.fail(m); errs[i] != nil {
				failedKeys[m.Key] = errs[i]
				continue
			}
		}
		r.msgs = append(r.msgs, m)
	}
	return outbox.NewPublishError(errs)
}

func (r *Recorder) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// SetDown makes every Publish fail with [ErrDown], unavailable (down), or
// accept again.
func (r *Recorder) SetDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
}

// FailWith sets a function that fails the messages it returns an error
// for; nil accepts all again.
func (r *Recorder) FailWith(f func(outbox.Message) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = f
}

// Before sets a function run at the start of every Publish, outside the
// Recorder's lock: to block a publish, or to see it.
func (r *Recorder) Before(f func(ctx context.Context, msgs []outbox.Message)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.before = f
}

// Messages returns the messages recorded so far, in order.
func (r *Recorder) Messages() []outbox.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// Calls returns how many times Publish was called.
func (r *Recorder) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// Await waits until cond, called with the messages recorded so far, holds,
// or fails tb after timeout.
func (r *Recorder) Await(tb testing.TB, timeout time.Duration, cond func(msgs []outbox.Message) bool) {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, changed, n := cond(r.msgs), r.changed, len(r.msgs)
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			tb.Fatalf("after %v the Recorder holds %d messages, and not what the test waits for", timeout, n)
		}
	}
}

// AwaitIDs waits until every one of ids was recorded, or fails tb after
// timeout.
func (r *Recorder) AwaitIDs(tb testing.TB, timeout time.Duration, ids []string) {
	tb.Helper()
	r.Await(tb, timeout, func(msgs []outbox.Message) bool { return len(missing(ids, IDs(msgs))) == 0 })
}

// IDs returns the IDs of msgs, in order.
func IDs(msgs []outbox.Message) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// CheckOrder checks what a broker received, got (message IDs in the
// broker's order, duplicates included), against want: for each key, the
// IDs enqueued in order. It fails tb for a message never received, a
// message that is not one of want's, and a key whose messages first
// arrived out of order; it returns how many duplicates got holds.
func CheckOrder(tb testing.TB, want map[string][]string, got []string) (duplicates int) {
	tb.Helper()
	type pos struct {
		key string
		i   int
	}
	where := map[string]pos{}
	for key, ids := range want {
		for i, id := range ids {
			where[id] = pos{key, i}
		}
	}
	next := map[string]int{} // per key, the index of the next first arrival
	seen := map[string]bool{}
	for _, id := range got {
		p, ok := where[id]
		if !ok {
			tb.Errorf("received %q, which was never enqueued", id)
			continue
		}
		if seen[id] {
			duplicates++
			continue
		}
		seen[id] = true
		if p.i != next[p.key] {
			tb.Errorf("key %q: %q (its message %d) arrived first after message %d; want them in order", p.key, id, p.i, next[p.key]-1)
		}
		next[p.key] = p.i + 1
	}
	var all []string
	for _, ids := range want {
		all = append(all, ids...)
	}
	if m := missing(all, got); len(m) > 0 {
		tb.Errorf("%d of %d messages never arrived, e.g. %q", len(m), len(all), m[0])
	}
	return duplicates
}

// missing returns the entries of want that got lacks.
func missing(want, got []string) []string {
	have := make(map[string]bool, len(got))
	for _, id := range got {
		have[id] = true
	}
	var m []string
	for _, id := range want {
		if !have[id] {
			m = append(m, id)
		}
	}
	return m
}
