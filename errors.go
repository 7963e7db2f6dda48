package idem

import (
	"errors"

	"github.com/idemgo/idem/storage"
)

// Sentinel errors. Check them with [errors.Is]: the Guard and the stores wrap
// them with detail. Those a store returns too are defined in package
// storage, and are the same values here.
var (
	// ErrInProgress: another holder is running the operation for the key and
	// the Guard's Wait passed (or was zero) before an outcome was stored.
	ErrInProgress = errors.New("idem: operation in progress")
	// ErrKeyReused: the key was first used with a different payload
	// (fingerprint). HTTP 422.
	ErrKeyReused = storage.ErrKeyReused
	// ErrLeaseLost: the token is not the key's current one (another holder
	// took over, the lease was released, the record has an outcome, expired
	// or was deleted). The record is unchanged.
	ErrLeaseLost = storage.ErrLeaseLost
	// ErrStoreUnavailable: the store could not be reached or answered with an
	// error; the Guard wraps the cause with it and fails closed.
	ErrStoreUnavailable = storage.ErrStoreUnavailable
	// ErrRefused: the store answered, and refuses the call for this key
	// alone (arguments out of its range, a stored record it cannot read).
	// Retrying gets the same answer, so it is not an outage and does not
	// wrap ErrStoreUnavailable: the Guard fails the key alone, never fails
	// open for it, and the other keys of a batch go on. A consumer
	// dead-letters such a message.
	ErrRefused = storage.ErrRefused
	// ErrTooManyAttempts: the key was claimed more than MaxAttempts times
	// without an outcome; it is now Failed, so a poison message stops looping.
	ErrTooManyAttempts = storage.ErrTooManyAttempts
	// ErrInvalidKey: the key is empty, too long or refused by the configured
	// key validation.
	ErrInvalidKey = storage.ErrInvalidKey
	// ErrClosed: Do was called after Guard.Close, or the operation's context
	// was cancelled by Close.
	ErrClosed = errors.New("idem: Guard closed")
	// ErrValueTooLarge: an outcome is longer than the store keeps (see
	// [storage.Store.MaxValueSize]). Stores wrap it in the error of a
	// Complete or Fail they refuse for its size. The Guard then stores it as
	// the key's outcome instead, so the operation, which ran, is not run
	// again: Do returns the value with an error wrapping ErrValueTooLarge,
	// and duplicates get a *PermanentError wrapping it.
	ErrValueTooLarge = storage.ErrValueTooLarge
)

// PermanentError marks an operation's error as permanent: the Guard stores
// it as the key's Failed outcome and every later duplicate gets it back
// instead of running the operation again. Create one with [Permanent].
type PermanentError struct {
	// Err is the cause. On a replayed failure it carries the stored message
	// only: the original error's type does not survive a store.
	Err error
	// Replayed is true when the error was read back from the store.
	Replayed bool
}

// Permanent marks err as permanent (see [PermanentError]). It returns nil
// for a nil err and err itself when it is already permanent.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*PermanentError](err); ok {
		return err
	}
	return &PermanentError{Err: err}
}

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "idem: permanent failure"
	}
	return e.Err.Error()
}

// Unwrap returns the cause.
func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err is or wraps a [PermanentError].
func IsPermanent(err error) bool {
	_, ok := errors.AsType[*PermanentError](err)
	return ok
}

// decodeFailure returns the stored failure b (see [storage.DecodeFailure])
// as Do replays it: a *PermanentError with Replayed set.
func decodeFailure(b []byte) error {
	return &PermanentError{Err: storage.DecodeFailure(b), Replayed: true}
}
