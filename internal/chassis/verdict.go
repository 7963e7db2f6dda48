package chassis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/adapter"
)

// Verdict is what a consumer does with a message once the Guard answered.
type Verdict struct {
	adapter.Action
	// Reason is why the message is dead-lettered (DeadLetter only).
	Reason consumer.Reason
	// Busy: Retry because another holder has the key: redeliver after the
	// busy delay, and count no attempt.
	Busy bool
	// Failed: Retry because the handler failed (an error without a
	// permanent mark, or a panic): an attempt, counted toward MaxAttempts.
	Failed bool
}

// Decide returns the verdict on a message that the Guard (or a TxGuard)
// answered with res and err, whose handler had failed failures times in a
// row before this attempt: internal/adapter's table, and a dead letter
// ([consumer.ReasonTooManyAttempts]) once the handler failed MaxAttempts
// times. Retry's Delay is the backoff of that many failures, or the busy
// delay.
func (o *Options[M]) Decide(res idem.Result, err error, failures int) Verdict {
	v := Verdict{Action: adapter.Decide(res, err)}
	if v.Class == adapter.Ended && ownTimeout(err) {
		// The handler's own deadline, not the consumer's: a downstream
		// call that timed out is a failure like any other, and counts.
		v.Class = adapter.Retryable
	}
	switch v.Verdict {
	case adapter.Retry:
		switch v.Class {
		case adapter.InProgress:
			v.Busy, v.Delay = true, o.busyDelay
			return v
		case adapter.Retryable:
			v.Failed = true
			if failures+1 >= o.maxAttempts {
				v.Verdict, v.Reason = adapter.DeadLetter, consumer.ReasonTooManyAttempts
				v.Cause = &TooManyAttemptsError{Attempts: failures + 1, Last: err}
				return v
			}
		}
		v.Delay = o.Backoff(failures + 1)
	case adapter.DeadLetter:
		v.Reason = ReasonOf(v.Action)
	}
	return v
}

// ownTimeout reports whether err, which ended a handler, is a deadline
// of the handler's own: the consumers end a handler's context by
// cancelling it (context.Canceled, with a cause), and the Guard by
// ErrClosed, so a bare DeadlineExceeded is the handler's.
func ownTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, idem.ErrClosed)
}

// DecideKey returns the verdict on a message whose key could not be had:
// keyErr is Key's error, or nil for a message without a key (which the
// consumer runs unguarded instead when UnkeyedUnguarded).
func (o *Options[M]) DecideKey(keyErr error) Verdict {
	v := Verdict{Action: adapter.Action{Verdict: adapter.DeadLetter, Class: adapter.InvalidKey, Cause: keyErr}, Reason: consumer.ReasonInvalidKey}
	if keyErr == nil {
		v.Cause, v.Reason = consumer.ErrNoKey, consumer.ReasonMissingKey
	}
	return v
}

// ReasonOf names why a message with the dead-letter action a is a dead
// letter.
func ReasonOf(a adapter.Action) consumer.Reason {
	switch a.Class {
	case adapter.TooManyAttempts:
		return consumer.ReasonTooManyAttempts
	case adapter.KeyReused:
		return consumer.ReasonKeyReused
	case adapter.InvalidKey:
		if errors.Is(a.Cause, consumer.ErrNoKey) {
			return consumer.ReasonMissingKey
		}
		return consumer.ReasonInvalidKey
	}
	return consumer.ReasonPermanent
}

// TooManyAttemptsError is the cause of a message dead-lettered because its
// handler failed MaxAttempts times in a row. It wraps
// idem.ErrTooManyAttempts and the last failure.
type TooManyAttemptsError struct {
	Attempts int
	Last     error
}

func (e *TooManyAttemptsError) Error() string {
	return fmt.Sprintf("%v: the handler failed %d times; the last time: %v", idem.ErrTooManyAttempts, e.Attempts, e.Last)
}

// Unwrap returns idem.ErrTooManyAttempts and the last failure.
func (e *TooManyAttemptsError) Unwrap() []error { return []error{idem.ErrTooManyAttempts, e.Last} }

// GiveUpAfter is how many times a dead letter the broker refuses is tried
// before the consumer gives up on it: MaxAttempts.
func (o *Options[M]) GiveUpAfter() int { return o.maxAttempts }

// Tries counts the failures in a row of messages by an identity the
// consumer chooses (the key and scope, a stream sequence), for consumers
// whose broker keeps no count of its own that fits: at most max entries,
// the oldest forgotten first.
type Tries struct {
	mu    sync.Mutex
	n     map[string]int
	order []string
	max   int
}

// NewTries returns a counter of at most max identities.
func NewTries(max int) *Tries { return &Tries{n: map[string]int{}, max: max} }

// Len returns how many identities have failures counted: when none has,
// a consumer need not work out a message's identity to count or forget.
func (t *Tries) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.n)
}

// Count returns the failures counted for id.
func (t *Tries) Count(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[id]
}

// Failed counts a failure of id and returns the count.
func (t *Tries) Failed(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.n[id]; !ok {
		for len(t.order) >= t.max {
			delete(t.n, t.order[0])
			t.order = t.order[1:]
		}
		t.order = append(t.order, id)
	}
	t.n[id]++
	return t.n[id]
}

// Forget drops id's count: its message is settled.
func (t *Tries) Forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.n[id]; ok {
		delete(t.n, id)
		t.order = slices.DeleteFunc(t.order, func(s string) bool { return s == id })
	}
}
