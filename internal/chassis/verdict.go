package chassis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/adapter"
)

// Settle is what a consumer does with a message once the Guard answered.
type Settle uint8

// The settlements of a [Verdict].
const (
	// Ack: the message is processed (its outcome is stored, or was stored
	// by an earlier delivery): acknowledge it, commit its offset.
	Ack Settle = iota + 1
	// Retry: the outcome is not known yet or was not stored: redeliver the
	// message after Verdict.Delay (nack with requeue, NakWithDelay, pause
	// the partition and seek back).
	Retry
	// DeadLetter: the message will never succeed as it is: publish it to
	// the dead-letter destination with Verdict.Cause, then acknowledge it.
	DeadLetter
)

// Verdict is what a consumer does with a message once the Guard answered:
// [Options.Decide]'s answer.
type Verdict struct {
	Settle Settle
	// Delay is how long to wait before the redelivery (Retry only).
	Delay time.Duration
	// Cause is why the message is retried or dead-lettered: the Guard's
	// error, or the handler's.
	Cause error
	// Replayed is true when the outcome (a value, or a stored permanent
	// failure) comes from an earlier delivery: this one ran nothing.
	Replayed bool
	// Reason is why the message is dead-lettered (DeadLetter only).
	Reason consumer.Reason
	// Busy: Retry because another holder has the key: redeliver after the
	// busy delay, and count no attempt.
	Busy bool
	// Failed: Retry because the handler failed (an error without a
	// permanent mark, or a panic): an attempt, counted toward MaxAttempts.
	Failed bool
}

// Outage is the verdict on a message that was not finished for a cause
// other than its handler (the store, the broker, a shutdown): retried, no
// attempt counted; Delay is the consumer's to set.
func Outage(cause error) Verdict { return Verdict{Settle: Retry, Cause: cause} }

// Decide returns the verdict on a message that the Guard (or a TxGuard)
// answered with res and err, whose handler had failed failures times in a
// row before this attempt:
//
//	the Guard answered                                    verdict
//	a value, fresh or replayed                            Ack
//	ErrValueTooLarge (the handler ran; not rerun)         Ack
//	ErrInProgress                                         Retry, busy delay
//	ErrStoreUnavailable, ErrLeaseLost, ErrClosed,
//	  the context ended                                   Retry, backoff
//	the handler's retryable error, panic or own timeout,
//	  ErrRefused (the store refuses this key alone)       Retry, backoff, Failed
//	  … for the MaxAttempts-th time in a row              DeadLetter (too-many-attempts)
//	a permanent error, fresh or replayed                  DeadLetter (permanent)
//	ErrTooManyAttempts                                    DeadLetter (too-many-attempts)
//	ErrKeyReused                                          DeadLetter (key-reused)
//	ErrInvalidKey                                         DeadLetter (invalid-key)
//
// Retry's Delay is the backoff of failures+1 failures, or the busy delay.
// An undecodable payload is the consumer's to dead-letter: the Guard never
// sees it.
func (o *Options[M]) Decide(res idem.Result, err error, failures int) Verdict {
	v := Verdict{Cause: err, Replayed: res.Replayed}
	c := adapter.Classify(err)
	if counts(c, err) {
		c = adapter.Retryable
	}
	switch c {
	case adapter.OK, adapter.TooLarge:
		v.Settle, v.Cause = Ack, nil
	case adapter.InProgress:
		v.Settle, v.Busy, v.Delay = Retry, true, o.busyDelay
	case adapter.Retryable, adapter.Refused:
		v.Settle, v.Failed = Retry, true
		if failures+1 >= o.maxAttempts {
			v.Settle, v.Reason = DeadLetter, consumer.ReasonTooManyAttempts
			v.Cause = &tooManyAttemptsError{attempts: failures + 1, last: err}
			return v
		}
		v.Delay = o.Backoff(failures + 1)
	case adapter.Unavailable, adapter.LeaseLost, adapter.Ended:
		v.Settle, v.Delay = Retry, o.Backoff(failures+1)
	case adapter.TooManyAttempts:
		v.Settle, v.Reason = DeadLetter, consumer.ReasonTooManyAttempts
	case adapter.KeyReused:
		v.Settle, v.Reason = DeadLetter, consumer.ReasonKeyReused
	case adapter.InvalidKey:
		v.Settle, v.Reason = DeadLetter, consumer.ReasonInvalidKey
		if errors.Is(err, consumer.ErrNoKey) {
			v.Reason = consumer.ReasonMissingKey
		}
	default: // Permanent, StoredFailure
		v.Settle, v.Reason = DeadLetter, consumer.ReasonPermanent
	}
	return v
}

// counts reports whether err, a handler's, of class c, is a failure that
// counts toward MaxAttempts: an error without a permanent mark, a panic,
// or the handler's own timeout (a downstream call that timed out is a
// failure like any other), but not the end of the consumer's or the
// lease's context.
func counts(c adapter.Class, err error) bool {
	return c == adapter.Retryable || c == adapter.Ended && ownTimeout(err)
}

// ownTimeout reports whether err, which ended a handler, is a deadline
// of the handler's own: the consumers end a handler's context by
// cancelling it (context.Canceled, with a cause), and the Guard by
// ErrClosed, so a bare DeadlineExceeded is the handler's.
func ownTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, idem.ErrClosed)
}

// DecideKey returns the verdict on a message whose key could not be had:
// keyErr is Read's error (Key's, or the panic of a function), or nil for a
// message without a key (which the consumer runs unguarded instead when
// UnkeyedUnguarded).
func (o *Options[M]) DecideKey(keyErr error) Verdict {
	if keyErr == nil {
		return Verdict{Settle: DeadLetter, Cause: consumer.ErrNoKey, Reason: consumer.ReasonMissingKey}
	}
	if _, ok := errors.AsType[*consumer.PanicError](keyErr); ok {
		return Verdict{Settle: DeadLetter, Cause: keyErr, Reason: consumer.ReasonPanicked}
	}
	return Verdict{Settle: DeadLetter, Cause: keyErr, Reason: consumer.ReasonInvalidKey}
}

// tooManyAttemptsError is the cause of a message dead-lettered because its
// handler failed MaxAttempts times in a row. It wraps
// idem.ErrTooManyAttempts and the last failure.
type tooManyAttemptsError struct {
	attempts int
	last     error
}

func (e *tooManyAttemptsError) Error() string {
	return fmt.Sprintf("%v: the handler failed %d times; the last time: %v", idem.ErrTooManyAttempts, e.attempts, e.last)
}

func (e *tooManyAttemptsError) Unwrap() []error { return []error{idem.ErrTooManyAttempts, e.last} }

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
