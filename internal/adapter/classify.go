package adapter

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgo/idem"
)

// Class is what an error of [idem.Guard.DoScoped] means to an adapter:
// which row of its status table answers it.
type Class uint8

// The classes of [Classify], most specific first.
const (
	// OK: no error.
	OK Class = iota
	// TooManyAttempts: the key was claimed more than the Guard's
	// MaxAttempts times without an outcome; it failed for good.
	TooManyAttempts
	// TooLarge: the outcome was too large for the store
	// (idem.ErrValueTooLarge), in this run or replayed: the operation ran.
	TooLarge
	// StoredFailure: a permanent failure replayed from the store; the
	// operation did not run in this call.
	StoredFailure
	// Permanent: the operation's own permanent error, from this run.
	Permanent
	// KeyReused: the key was first used with another payload.
	KeyReused
	// InvalidKey: the key (or the scope) was refused, or is missing.
	InvalidKey
	// InProgress: another holder runs the operation, and the Guard's Wait
	// passed.
	InProgress
	// LeaseLost: the operation ran, but its lease was lost before the
	// outcome was stored.
	LeaseLost
	// Refused: the store answered, and refuses the key alone
	// (idem.ErrRefused): a record it cannot read, arguments out of its
	// range. Retrying will likely get the same answer, but an operator may
	// mend the record: a consumer counts it as a failed attempt, and
	// dead-letters the message after its attempts.
	Refused
	// Unavailable: the store could not be reached, or did not take the
	// outcome.
	Unavailable
	// Ended: the caller's context ended, or the Guard was closed.
	Ended
	// Retryable: any other error: the operation's own, which released the
	// key, so a retry runs it again.
	Retryable
)

var classNames = [...]string{"ok", "too_many_attempts", "too_large", "stored_failure", "permanent",
	"key_reused", "invalid_key", "in_progress", "lease_lost", "refused", "unavailable", "ended", "retryable"}

// String returns the class name in snake case, for logs and metric labels.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Classify returns the class of err, an error of [idem.Guard.DoScoped] (or
// of the operation it ran). Where an error has several marks (a permanent
// error that wraps ErrTooManyAttempts, a failed Fail joined with the
// operation's permanent error), the first class in the list of constants
// wins. An error that the caller's context ending caused but that does not
// wrap context.Canceled or context.DeadlineExceeded (a custom cancellation
// cause) is Retryable: an adapter that knows its context checks it too.
func Classify(err error) Class {
	if err == nil {
		return OK
	}
	if errors.Is(err, idem.ErrTooManyAttempts) {
		return TooManyAttempts
	}
	if errors.Is(err, idem.ErrValueTooLarge) {
		return TooLarge
	}
	if pe, ok := errors.AsType[*idem.PermanentError](err); ok {
		if pe.Replayed {
			return StoredFailure
		}
		return Permanent
	}
	for _, c := range sentinels {
		if errors.Is(err, c.err) {
			return c.class
		}
	}
	return Retryable
}

var sentinels = [...]struct {
	err   error
	class Class
}{
	{idem.ErrKeyReused, KeyReused},
	{idem.ErrInvalidKey, InvalidKey},
	{idem.ErrInProgress, InProgress},
	{idem.ErrLeaseLost, LeaseLost},
	{idem.ErrRefused, Refused},
	{idem.ErrStoreUnavailable, Unavailable},
	{idem.ErrClosed, Ended},
	{context.Canceled, Ended},
	{context.DeadlineExceeded, Ended},
}
