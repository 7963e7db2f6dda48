package storage

import (
	"errors"
	"fmt"
)

// The errors of the store contract, wrapped or not: a store returns them,
// and a failure decodes to ErrTooManyAttempts or ErrValueTooLarge. Each is
// defined here once. Package idem exports the ones its users check as the
// same values (idem.ErrLeaseLost is ErrLeaseLost), so a caller checks them
// with [errors.Is] against either.
var (
	// ErrLeaseLost: the token is not the key's current one (another holder
	// took over, the lease was released, the record has an outcome, expired
	// or was deleted). The record is unchanged.
	ErrLeaseLost = errors.New("idem: lease lost")
	// ErrKeyReused: the key was first claimed with a different fingerprint.
	ErrKeyReused = errors.New("idem: idempotency key reused with a different payload")
	// ErrNotFound: no record for the key (never claimed, expired or
	// deleted).
	ErrNotFound = errors.New("idem: record not found")
	// ErrStoreUnavailable: the store could not be reached or answered with
	// an error. A store may wrap its failures with it; the Guard wraps
	// every store failure with it and fails closed.
	ErrStoreUnavailable = errors.New("idem: store unavailable")
	// ErrValueTooLarge: a value is longer than the store keeps (see
	// [Store.MaxValueSize]). A store's refusal wraps it, as
	// [*ValueTooLargeError] does.
	ErrValueTooLarge = errors.New("idem: outcome too large to store")
	// ErrTooManyAttempts: the key was claimed more than
	// [ClaimArgs.MaxAttempts] times without an outcome; the claim that
	// would have been one more marked it Failed ([TooManyAttemptsCause]),
	// so a poison message stops looping.
	ErrTooManyAttempts = errors.New("idem: too many attempts")
	// ErrInvalidKey: the key is empty, longer than the store or the Guard
	// takes, or refused by the Guard's key validation.
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
)

// ValueTooLargeError is the error of a store that refuses a value (or
// cause) longer than its [Store.MaxValueSize]: from Complete, Fail and
// CompleteBatch, which then write nothing; and, from stores whose records
// other programs may write, from Claim, ClaimBatch (in the entry's Err) and
// Get for a record whose stored result is longer, which they refuse to
// read. It wraps [ErrValueTooLarge].
type ValueTooLargeError struct {
	// Store names the store in the message ("redisstore").
	Store string
	// Size is the value's length in bytes.
	Size int
	// Max is the store's MaxValueSize.
	Max int
	// Stored is set when the value is a stored record's, refused on read.
	Stored bool
	// Key is the store key of that record (Stored only).
	Key string
}

func (e *ValueTooLargeError) Error() string {
	if e.Stored {
		return fmt.Sprintf("%s: the record of key %q holds a result of %d bytes, larger than Config.MaxValueSize (%d)", e.Store, e.Key, e.Size, e.Max)
	}
	return fmt.Sprintf("%s: value of %d bytes is larger than Config.MaxValueSize (%d)", e.Store, e.Size, e.Max)
}

// Unwrap returns [ErrValueTooLarge], which the Guard and the adapters look
// for: the outcome cannot be kept (or, read back, replayed).
func (e *ValueTooLargeError) Unwrap() error { return ErrValueTooLarge }

// ErrRefused: the store answered, and refuses the call for this key alone:
// its arguments are out of the store's range (a fingerprint or key longer
// than it keeps), or the stored record is one it cannot read (written by
// another program or format version, larger than it reads, a Redis key of
// another type). The record is unchanged. Retrying the same call gets the
// same answer, so it is not an outage: the Guard fails such a key alone,
// never fails open for it, and a batch's other keys go on. A store wraps
// its own sentinels for such refusals with it ([Refusal]); a refusal
// never wraps [ErrStoreUnavailable].
var ErrRefused = errors.New("idem: the store refuses the call")

// Refusal returns a sentinel error with message msg that wraps
// [ErrRefused], for a store's own refusals: errors.Is finds both.
func Refusal(msg string) error { return &refusal{msg} }

type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return ErrRefused }

// Is reports that a value too large for the store is a refusal
// ([ErrRefused]) besides [ErrValueTooLarge].
func (e *ValueTooLargeError) Is(target error) bool { return target == ErrRefused }

// ErrChanged: [Store.DeleteIf] found the key's record in another status or
// with another token than the caller read (a holder took it over or
// finished it since), and deleted nothing.
var ErrChanged = errors.New("idem: record changed since it was read")
