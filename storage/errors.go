package storage

import (
	"errors"
	"fmt"
)

// The errors a store returns, wrapped or not. Package idem exports the same
// values (idem.ErrLeaseLost is ErrLeaseLost), so a caller checks them with
// [errors.Is] against either.
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

// failureTooManyAttempts is the kind byte of the encoded failure of a
// record failed by the attempt cap; package idem's failure encoding uses
// the same byte.
const failureTooManyAttempts = 'A'

// TooManyAttemptsCause returns the encoded failure a store writes as the
// result of a record it marks Failed because a claim would exceed
// [ClaimArgs.MaxAttempts]. The Guard replays it as idem.ErrTooManyAttempts.
func TooManyAttemptsCause() []byte { return []byte{failureTooManyAttempts} }

// ErrChanged: [Store.DeleteIf] found the key's record in another status or
// with another token than the caller read (a holder took it over or
// finished it since), and deleted nothing.
var ErrChanged = errors.New("idem: record changed since it was read")
