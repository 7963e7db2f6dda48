package adapter

import (
	"cmp"
	"fmt"
	"time"

	"github.com/idemgo/idem"
)

// Verdict is what a consumer does with a message once the Guard answered.
type Verdict uint8

// The verdicts of [Decide].
const (
	// Ack: the message is processed (its outcome is stored, or was stored
	// by an earlier delivery): acknowledge it, commit its offset.
	Ack Verdict = iota + 1
	// Retry: the outcome is not known yet or was not stored: redeliver the
	// message after Action.Delay (nack with requeue, NakWithDelay, pause
	// the partition and seek back).
	Retry
	// DeadLetter: the message will never succeed as it is: publish it to
	// the dead-letter destination with Action.Cause, then acknowledge it.
	DeadLetter
)

var verdictNames = [...]string{Ack: "ack", Retry: "retry", DeadLetter: "dead_letter"}

// String returns the verdict's name in snake case, for logs and metrics.
func (v Verdict) String() string {
	if v != 0 && int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Action is [Decide]'s answer.
type Action struct {
	Verdict Verdict
	// Class is the classification of the Guard's error ([Classify]).
	Class Class
	// Delay is how long to wait before the redelivery (Retry only).
	Delay time.Duration
	// Cause is why the message is retried or dead-lettered: the Guard's
	// error, or the operation's.
	Cause error
	// Replayed is true when the outcome (a value, or a stored permanent
	// failure) comes from an earlier delivery: this one ran nothing.
	Replayed bool
}

// Delays are the pauses before a redelivery, by reason. The zero value of
// a field means its default in [DefaultDelays].
type Delays struct {
	// InProgress: another consumer holds the key. Default 1s.
	InProgress time.Duration
	// Unavailable: the store could not be reached or did not take the
	// outcome; the lease was lost; the consumer is shutting down. Default 1s.
	Unavailable time.Duration
	// Failed: the operation failed with a retryable error. Default 1s.
	Failed time.Duration
}

// DefaultDelays are the delays of [Decide].
var DefaultDelays = Delays{InProgress: time.Second, Unavailable: time.Second, Failed: time.Second}

// Decide is [Delays.Decide] with [DefaultDelays].
func Decide(res idem.Result, err error) Action { return DefaultDelays.Decide(res, err) }

// Decide returns what a consumer does with a message whose operation the
// Guard answered with res and err:
//
//	the Guard answered                                   verdict
//	a value, fresh or replayed                           Ack
//	ErrValueTooLarge (the operation ran; not rerun)      Ack
//	ErrInProgress                                        Retry, d.InProgress
//	ErrStoreUnavailable, ErrLeaseLost, ErrClosed,
//	  the context ended                                  Retry, d.Unavailable
//	the operation's retryable error (or panic, re-raised) Retry, d.Failed
//	a permanent error, fresh or replayed                 DeadLetter
//	ErrTooManyAttempts                                   DeadLetter
//	ErrKeyReused                                         DeadLetter
//	ErrInvalidKey, a missing key ([Policy.Key])          DeadLetter
//
// An undecodable payload is the consumer's to dead-letter: the Guard never
// sees it.
func (d Delays) Decide(res idem.Result, err error) Action {
	c := Classify(err)
	a := Action{Class: c, Cause: err, Replayed: res.Replayed}
	switch c {
	case OK, TooLarge:
		a.Verdict, a.Cause = Ack, nil
	case InProgress:
		a.Verdict, a.Delay = Retry, cmp.Or(d.InProgress, DefaultDelays.InProgress)
	case Unavailable, LeaseLost, Ended:
		a.Verdict, a.Delay = Retry, cmp.Or(d.Unavailable, DefaultDelays.Unavailable)
	case Retryable:
		a.Verdict, a.Delay = Retry, cmp.Or(d.Failed, DefaultDelays.Failed)
	default: // Permanent, StoredFailure, TooManyAttempts, KeyReused, InvalidKey
		a.Verdict = DeadLetter
	}
	return a
}
