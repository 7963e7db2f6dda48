package idem

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idemgo/idem/storage"
)

// Sentinel errors. Check them with [errors.Is]: the Guard and the stores wrap
// them with detail.
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
	ErrTooManyAttempts = errors.New("idem: too many attempts")
	// ErrInvalidKey: the key is empty, too long or refused by the configured
	// key validation.
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
	// ErrNotFound: no record for the key (never claimed, expired or deleted).
	ErrNotFound = storage.ErrNotFound
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

// The first byte of an encoded failure says what failed.
const (
	failurePermanent       = 'P'
	failureTooManyAttempts = 'A' // storage.TooManyAttemptsCause's byte
	failureTooLarge        = 'L'
	failureUnkept          = 'U' // a permanent failure whose message was too large to store
)

// shortFailure returns the shortest form of the encoded failure b: its
// kind alone, for a store that cannot keep b.
func shortFailure(b []byte) []byte {
	if len(b) > 0 && (b[0] == failureTooLarge || b[0] == failureTooManyAttempts) {
		return b[:1]
	}
	return []byte{failureUnkept}
}

// EncodeFailure encodes a permanent error as the result of a Failed record:
// a kind byte and the error's message. Stores write it verbatim; stores that
// mark a record Failed on their own for exceeding MaxAttempts write
// [TooManyAttemptsCause].
func EncodeFailure(err error) []byte {
	if errors.Is(err, ErrTooManyAttempts) {
		return storage.TooManyAttemptsCause()
	}
	kind, msg := byte(failurePermanent), "idem: permanent failure"
	if errors.Is(err, ErrValueTooLarge) {
		kind = failureTooLarge
	}
	if err != nil {
		msg = err.Error()
	}
	b := make([]byte, 0, 1+len(msg))
	return append(append(b, kind), msg...)
}

// DecodeFailure turns a Failed record's result back into an error: a
// *PermanentError with Replayed set, wrapping ErrTooManyAttempts for a
// record failed by the attempt cap and ErrValueTooLarge for an outcome
// that was too large to store. It never fails: bytes it does not know
// become a permanent error that says so.
func DecodeFailure(b []byte) error {
	if len(b) == 0 {
		return &PermanentError{Err: errors.New("idem: permanent failure (no message stored)"), Replayed: true}
	}
	switch b[0] {
	case failureTooManyAttempts:
		return &PermanentError{Err: ErrTooManyAttempts, Replayed: true}
	case failurePermanent:
		return &PermanentError{Err: errors.New(string(b[1:])), Replayed: true}
	case failureUnkept:
		return &PermanentError{Err: errors.New("idem: permanent failure (its message was too large to store)"), Replayed: true}
	case failureTooLarge:
		msg, _ := strings.CutPrefix(string(b[1:]), ErrValueTooLarge.Error())
		return &PermanentError{Err: fmt.Errorf("%w%s", ErrValueTooLarge, msg), Replayed: true}
	}
	return &PermanentError{Err: fmt.Errorf("idem: permanent failure (undecodable stored cause of %d bytes)", len(b)), Replayed: true}
}
