package idem

import (
	"context"
	"sync"
	"time"
)

// outcomeCtx is the context of an outcome write: the caller's values, none
// of its cancellation, and a deadline of its own. Unlike
// context.WithTimeout(context.WithoutCancel(ctx)) it allocates nothing
// until a store asks for Done or Value, so an in-process store pays
// nothing for it.
type outcomeCtx struct {
	parent   context.Context
	deadline time.Time

	mu     sync.Mutex
	done   chan struct{}
	timer  *time.Timer
	err    error
	values context.Context // context.WithoutCancel(parent), made on first Value
}

func (o *outcomeCtx) reset(parent context.Context, deadline time.Time) {
	o.parent, o.deadline = parent, deadline
	o.done, o.timer, o.err, o.values = nil, nil, nil, nil
}

// stop releases the timer once the write returned.
func (o *outcomeCtx) stop() {
	o.mu.Lock()
	if o.timer != nil {
		o.timer.Stop()
	}
	o.mu.Unlock()
}

func (o *outcomeCtx) Deadline() (time.Time, bool) { return o.deadline, true }

func (o *outcomeCtx) Done() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done == nil {
		o.done = make(chan struct{})
		if d := time.Until(o.deadline); d > 0 && o.err == nil {
			o.timer = time.AfterFunc(d, o.expire)
		} else {
			o.err = context.DeadlineExceeded
			close(o.done)
		}
	}
	return o.done
}

func (o *outcomeCtx) expire() {
	o.mu.Lock()
	if o.err == nil {
		o.err = context.DeadlineExceeded
		close(o.done)
	}
	o.mu.Unlock()
}

func (o *outcomeCtx) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil && o.done == nil && !time.Now().Before(o.deadline) {
		// No one waits on Done: latch the expiry so Done, when asked,
		// agrees and comes closed.
		o.err = context.DeadlineExceeded
	}
	return o.err
}

func (o *outcomeCtx) Value(key any) any {
	o.mu.Lock()
	if o.values == nil {
		// WithoutCancel hides the caller's cancellation from
		// context.Cause as well as from Done.
		o.values = context.WithoutCancel(o.parent)
	}
	v := o.values
	o.mu.Unlock()
	return v.Value(key)
}
