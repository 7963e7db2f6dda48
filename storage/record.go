package storage

import (
	"fmt"
	"time"
)

// Status is the state of a [Record].
type Status uint8

// The states of a record. A key that has no record is absent; every store
// reports that as [ErrNotFound] from Get.
const (
	// StatusInProgress: a holder claimed the key and is running the operation
	// under a lease.
	StatusInProgress Status = 1
	// StatusCompleted: the operation finished and its value is stored.
	StatusCompleted Status = 2
	// StatusFailed: the operation failed permanently and its encoded error
	// (see [EncodeFailure]) is stored.
	StatusFailed Status = 3
)

// String returns the status name.
func (s Status) String() string {
	switch s {
	case StatusInProgress:
		return "InProgress"
	case StatusCompleted:
		return "Completed"
	case StatusFailed:
		return "Failed"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Done reports whether s is an outcome (Completed or Failed).
func (s Status) Done() bool { return s == StatusCompleted || s == StatusFailed }

// Token identifies one claim of a key: the fencing token of its lease. A
// store never hands out the same token twice for a key, not even after the
// key's record expired and was created again. The zero Token is never issued.
type Token uint64

// Record is one idempotency record as a store keeps it.
type Record struct {
	// Key is the store key: the namespace and the caller's key combined by
	// the Guard (see [StoreKey]).
	Key string
	// Status is InProgress, Completed or Failed.
	Status Status
	// Token is the token of the current claim. It is zero once the lease was
	// given up with Release: no token is current then.
	Token Token
	// Attempt counts the claims of the key: 1 at the first claim, one more at
	// every takeover.
	Attempt int
	// Fingerprint is the hash of the payload given at the first claim.
	Fingerprint []byte
	// LeaseUntil is when the holder's lease ends (InProgress only).
	LeaseUntil time.Time
	// Result is the value (Completed) or the encoded permanent error (Failed).
	Result []byte
	// ExpiresAt is when the store forgets the record.
	ExpiresAt time.Time
}

// ClaimArgs are the arguments of [Store.Claim].
type ClaimArgs struct {
	// Key is the store key (see [StoreKey]); any bytes.
	Key string
	// Fingerprint is fixed at the first claim; a later claim with a different
	// fingerprint gets ErrKeyReused. Compared byte for byte.
	Fingerprint []byte
	// Lease is how long the holder may run before another claim may take
	// over. Must be positive.
	Lease time.Duration
	// Retention is how long a record nobody finishes is kept after its lease
	// ends, and how long the Failed record written when MaxAttempts is
	// exceeded is kept. Must be positive.
	Retention time.Duration
	// MaxAttempts, when positive, caps the claims of the key: the claim that
	// would be attempt MaxAttempts+1 instead marks the record Failed with
	// [TooManyAttemptsCause] and returns it as a Duplicate. Zero means no cap.
	MaxAttempts int
}

// Outcome says what a claim got.
type Outcome uint8

// The outcomes of a claim.
const (
	// Acquired: the caller holds the lease and must Complete, Fail or
	// Release with [Claim.Token].
	Acquired Outcome = 1
	// Busy: another holder has a live lease; [Claim.Record] is its record.
	Busy Outcome = 2
	// Duplicate: the key has an outcome; [Claim.Record] holds it.
	Duplicate Outcome = 3
)

// String returns the outcome name.
func (o Outcome) String() string {
	switch o {
	case Acquired:
		return "Acquired"
	case Busy:
		return "Busy"
	case Duplicate:
		return "Duplicate"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Claim is the answer of [Store.Claim].
type Claim struct {
	// Outcome is Acquired, Busy or Duplicate.
	Outcome Outcome
	// Token is the new lease's token when Acquired.
	Token Token
	// Record is the record after the claim: the new InProgress record when
	// Acquired, the holder's record when Busy, the outcome when Duplicate.
	Record Record
	// Err is set by [Store.ClaimBatch] only, for an error of this one
	// key (ErrKeyReused); Claim returns such an error as its error instead.
	Err error
}

// Completion is one entry of [Store.CompleteBatch]: the arguments
// of one [Store.Complete].
type Completion struct {
	Key       string
	Token     Token
	Value     []byte
	Retention time.Duration
}
