package consume

import (
	"errors"

	"github.com/idemgo/idem"
)

// This file is the consumer's policy: what becomes of a record given its
// key and its outcome. It is the one place to change, or to replace by a
// policy shared with the other adapters.

// Action is what the consumer does with a record once it was handled.
type Action uint8

const (
	// Ack: the record is done (its outcome stored, or a duplicate); its
	// offset may be committed.
	Ack Action = iota
	// Retry: the record is not done; the partition waits with backoff and
	// handles it again, committing nothing past it.
	Retry
	// DeadLetter: the record can never succeed; it goes to the dead-letter
	// topic with the cause, then counts as done.
	DeadLetter
	// RunUnguarded: the record has no key and the consumer was told to run
	// such records without idempotency.
	RunUnguarded
)

// Decision is an [Action] and, for DeadLetter, its cause.
type Decision struct {
	Action Action
	Cause  error
}

// DecideKey says what to do with a record whose key could not be had:
// dead-letter it, or run it unguarded when unkeyed records are allowed and
// it simply had none.
func DecideKey(keyErr error, unkeyed bool) Decision {
	if unkeyed && errors.Is(keyErr, ErrNoKey) {
		return Decision{Action: RunUnguarded}
	}
	return Decision{Action: DeadLetter, Cause: keyErr}
}

// Decide says what to do with a record given the error its handling ended
// with (nil for a value, fresh or replayed).
//
//   - nil: Ack.
//   - a store failure, a lost lease, a busy key, ErrNotRun, a cancelled
//     context or any other error of the handler: Retry. (Retrying an error
//     forever is what Config.MaxAttempts of the Guard stops.)
//   - a permanent error, stored now or replayed (ErrTooManyAttempts among
//     them), a key reused with another payload, an invalid key:
//     DeadLetter. A replayed permanent error is dead-lettered again: the
//     dead letter of its first run may not have been produced.
func Decide(err error) Decision {
	switch {
	case err == nil:
		return Decision{Action: Ack}
	case errors.Is(err, idem.ErrStoreUnavailable), errors.Is(err, idem.ErrLeaseLost):
		return Decision{Action: Retry} // also when joined to a permanent error whose Fail failed
	case idem.IsPermanent(err), errors.Is(err, idem.ErrKeyReused), errors.Is(err, idem.ErrInvalidKey):
		return Decision{Action: DeadLetter, Cause: err}
	}
	return Decision{Action: Retry}
}
