package storage

import (
	"errors"
	"fmt"
	"strings"
)

// A Failed record's result is an encoded failure: a kind byte, then, for
// the kinds that have one, the error's message. The executors (the Guard,
// the transactional guards) write it with [EncodeFailure] and read it with
// [DecodeFailure]; a store writes [TooManyAttemptsCause] on its own, and
// keeps any other failure as the bytes it was given.
const (
	failurePermanent       = 'P' // a permanent error: its message follows
	failureTooManyAttempts = 'A' // ErrTooManyAttempts, alone
	failureTooLarge        = 'L' // ErrValueTooLarge: the outcome was not kept; its message follows
	failureUnkept          = 'U' // a permanent failure whose message was too large to store, alone
)

// EncodeFailure encodes err, an operation's permanent error, as the result
// of a Failed record: its kind and its message. An err that wraps
// [ErrTooManyAttempts] is [TooManyAttemptsCause], and one that wraps
// [ErrValueTooLarge] decodes to an error that wraps it again; a nil err
// encodes a permanent failure with no message of its own.
func EncodeFailure(err error) []byte {
	if errors.Is(err, ErrTooManyAttempts) {
		return TooManyAttemptsCause()
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

// DecodeFailure turns a Failed record's result back into the error it
// encodes (see [EncodeFailure]): one with the stored message,
// [ErrTooManyAttempts] for a record failed by the attempt cap, or an error
// wrapping [ErrValueTooLarge] for an outcome that was too large to store.
// The original error's type does not survive a store: the Guard replays
// the error inside an idem.PermanentError. DecodeFailure never fails:
// bytes it does not know become an error that says so.
func DecodeFailure(b []byte) error {
	if len(b) == 0 {
		return errors.New("idem: permanent failure (no message stored)")
	}
	switch b[0] {
	case failureTooManyAttempts:
		return ErrTooManyAttempts
	case failurePermanent:
		return errors.New(string(b[1:]))
	case failureUnkept:
		return errors.New("idem: permanent failure (its message was too large to store)")
	case failureTooLarge:
		msg, _ := strings.CutPrefix(string(b[1:]), ErrValueTooLarge.Error())
		return fmt.Errorf("%w%s", ErrValueTooLarge, msg)
	}
	return fmt.Errorf("idem: permanent failure (undecodable stored cause of %d bytes)", len(b))
}

// ShortFailure returns the shortest encoding of the failure b: its kind
// alone, which says all of a failure by the attempt cap or of an outcome
// too large to store, and marks any other as a permanent failure whose
// message was not kept. The Guard stores it in place of a failure too
// long for the store.
func ShortFailure(b []byte) []byte {
	if len(b) > 0 && (b[0] == failureTooLarge || b[0] == failureTooManyAttempts) {
		return b[:1]
	}
	return []byte{failureUnkept}
}

// TooManyAttemptsCause returns the encoded failure a store writes as the
// result of a record it marks Failed because a claim would exceed
// [ClaimArgs.MaxAttempts]. It decodes to [ErrTooManyAttempts].
func TooManyAttemptsCause() []byte { return []byte{failureTooManyAttempts} }
