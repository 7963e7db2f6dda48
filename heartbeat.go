package idem

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// leaseKeeper is what the heartbeat needs of its owner: to extend a running
// call's lease in the store, and to stop a call whose lease is lost. The
// Guard is one (below); heartbeat_test.go drives the heartbeat alone with a
// fake.
type leaseKeeper interface {
	// extendLease extends c's lease by another lease, as Store.Extend does:
	// ErrLeaseLost when another holder has taken the key over; any other
	// error is retried until c's local deadline.
	extendLease(ctx context.Context, c *call) error
	// loseLease cancels c's fn with cause: its lease was lost, could not be
	// confirmed before the local deadline, or the Guard closed.
	loseLease(c *call, cause error)
}

// heartbeats extends the leases of the running calls of one Guard.
//
// Every call is due for a heartbeat Lease/3 after it was claimed or last
// extended. All calls of a Guard share one lease, so the due times are
// ordered as the calls were queued: a FIFO list and one goroutine that
// sleeps until its head is due suffice, with no timer or goroutine per call.
// A call that finishes first (the common case) costs a list insert and
// remove. The goroutine starts with the first call and exits after a lease
// without calls, or at Close.
//
// When a call is due, a goroutine of its own extends the lease, retrying
// store errors, until the local deadline: the lease end last confirmed by
// the store minus a safety margin. If the deadline passes unconfirmed, or
// the store says the token is no longer current, fn's context is cancelled,
// so a holder cut off from the store stops before the store lets another
// holder take over.
type heartbeats struct {
	keeper       leaseKeeper
	lease        time.Duration
	storeTimeout time.Duration // bounds each extend
	interval     time.Duration // lease/3
	margin       time.Duration // safety margin before the lease end
	retry        time.Duration // pause between failed extends

	mu         sync.Mutex
	head, tail *call
	running    bool
	closed     bool
	sleepUntil time.Time // when the loop's timer fires next
	wake       chan struct{}
	quit       chan struct{}
	wg         sync.WaitGroup
}

func (h *heartbeats) init(g *Guard) { h.setup(g, g.cfg.Lease, g.cfg.StoreTimeout) }

// setup readies h to keep leases of the given length through k, each
// extend bounded by storeTimeout.
func (h *heartbeats) setup(k leaseKeeper, lease, storeTimeout time.Duration) {
	h.keeper = k
	h.lease = lease
	h.storeTimeout = storeTimeout
	h.interval = lease / 3
	h.margin = lease / 10
	h.retry = max(lease/30, time.Millisecond)
	h.wake = make(chan struct{}, 1)
	h.quit = make(chan struct{})
}

// start queues c, claimed at sent, for its first heartbeat.
func (h *heartbeats) start(c *call, sent time.Time) error {
	h.mu.Lock()
	c.deadline = sent.Add(h.lease - h.margin)
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	h.pushLocked(c, sent)
	h.mu.Unlock()
	return nil
}

// stop takes c off the heartbeat for good: fn returned.
func (h *heartbeats) stop(c *call) {
	h.mu.Lock()
	c.finished = true
	if c.queued {
		h.removeLocked(c)
	}
	h.mu.Unlock()
}

// pushLocked queues c for a heartbeat an interval after now, and makes sure
// the loop runs. h is locked and not closed.
func (h *heartbeats) pushLocked(c *call, now time.Time) {
	c.due = now.Add(h.interval)
	c.queued = true
	c.prev, c.next = h.tail, nil
	if h.tail != nil {
		h.tail.next = c
	} else {
		h.head = c
		// The loop never sleeps longer than an interval, so a call queued
		// after it went to sleep is due after it wakes: waking it is only
		// needed when it sleeps until later, which a Close or a slow start
		// could make happen. Not waking it on every call of an otherwise
		// idle Guard saves a goroutine switch per Do.
		if h.sleepUntil.After(c.due) {
			select {
			case h.wake <- struct{}{}:
			default:
			}
		}
	}
	h.tail = c
	if !h.running {
		h.running = true
		h.wg.Add(1)
		go h.loop()
	}
}

func (h *heartbeats) removeLocked(c *call) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		h.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		h.tail = c.prev
	}
	c.prev, c.next, c.queued = nil, nil, false
}

func (h *heartbeats) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.quit)
	var queued []*call
	for c := h.head; c != nil; c = c.next {
		queued = append(queued, c)
	}
	h.mu.Unlock()
	// Calls still running lose their heartbeat: cancel them rather than
	// let them run past a lease nobody extends. Extenders in flight see
	// quit or closed and do the same for theirs.
	for _, c := range queued {
		h.lose(c, ErrClosed)
	}
	h.wg.Wait()
}

// loop runs the heartbeats that fall due. It sleeps until the head of the
// list is due, or an interval when the list is empty, and exits after a
// lease without calls.
func (h *heartbeats) loop() {
	defer h.wg.Done()
	timer := time.NewTimer(h.interval)
	defer timer.Stop()
	idleSince := time.Now()
	for {
		h.mu.Lock()
		now := time.Now()
		for h.head != nil && !h.head.due.After(now) {
			c := h.head
			h.removeLocked(c)
			h.wg.Add(1)
			go h.extend(c)
		}
		wait := h.interval
		switch {
		case h.head != nil:
			wait = h.head.due.Sub(now)
			idleSince = time.Time{}
		case idleSince.IsZero():
			idleSince = now
		case now.Sub(idleSince) >= h.lease:
			h.running = false
			h.sleepUntil = time.Time{}
			h.mu.Unlock()
			return
		}
		h.sleepUntil = now.Add(wait)
		h.mu.Unlock()

		timer.Reset(wait) // since Go 1.23 no stale tick survives a Reset
		select {
		case <-timer.C:
		case <-h.wake:
		case <-h.quit:
			h.mu.Lock()
			h.running = false
			h.mu.Unlock()
			return
		}
	}
}

// extend renews c's lease until the store confirms it, the store says it is
// lost, the local deadline passes, or fn returns.
func (h *heartbeats) extend(c *call) {
	defer h.wg.Done()
	for {
		h.mu.Lock()
		finished, deadline := c.finished, c.deadline
		h.mu.Unlock()
		if finished {
			return
		}
		if !time.Now().Before(deadline) {
			h.lose(c, errLocalDeadline)
			return
		}
		sent := time.Now()
		until := deadline
		if limit := sent.Add(h.storeTimeout); limit.Before(until) {
			until = limit
		}
		ctx, cancel := context.WithDeadline(context.Background(), until)
		err := h.keeper.extendLease(ctx, c)
		cancel()
		switch {
		case err == nil:
			h.mu.Lock()
			c.deadline = sent.Add(h.lease - h.margin)
			closed := h.closed
			if !c.finished && !closed {
				h.pushLocked(c, time.Now())
			}
			h.mu.Unlock()
			if closed {
				h.lose(c, ErrClosed)
			}
			return
		case errors.Is(err, ErrLeaseLost):
			h.lose(c, errDisplaced)
			return
		}
		select {
		case <-time.After(min(h.retry, time.Until(deadline))):
		case <-h.quit:
			h.lose(c, ErrClosed)
			return
		}
	}
}

// lose has c's fn cancelled with cause, unless fn has returned.
func (h *heartbeats) lose(c *call, cause error) {
	h.mu.Lock()
	finished := c.finished
	h.mu.Unlock()
	if !finished {
		h.keeper.loseLease(c, cause)
	}
}

// extendLease is the Guard's side of a heartbeat: Store.Extend, observed,
// and logged when it failed for a reason the heartbeat retries.
func (g *Guard) extendLease(ctx context.Context, c *call) error {
	sent := time.Now()
	err := g.store.Extend(ctx, c.storeKey, c.token, g.cfg.Lease)
	g.observe(&c.tctx, Event{Op: OpExtend, Scope: c.scope, Key: c.key, Duration: time.Since(sent), Err: err})
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		g.cfg.Logger.Warn("idem: heartbeat could not extend the lease",
			slog.String("namespace", g.cfg.Namespace), slog.String("scope", c.scope), slog.String("key", c.key), slog.Any("error", err))
	}
	return err
}

// loseLease cancels c's fn, saying why in the log and to the Observer.
func (g *Guard) loseLease(c *call, cause error) {
	g.cfg.Logger.Warn("idem: lease lost, cancelling the operation",
		slog.String("namespace", g.cfg.Namespace), slog.String("scope", c.scope), slog.String("key", c.key), slog.Any("cause", cause))
	g.observe(&c.tctx, Event{Op: OpLeaseLost, Scope: c.scope, Key: c.key, Err: cause})
	c.cancel(cause)
}
