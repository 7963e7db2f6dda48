package idemnats

// This file is the adapter policy every idem consumer adapter shares: the
// scope decision, and what a delivery's outcome means for the broker (ack,
// redeliver after a delay, or dead-letter with a cause). It is kept in this
// one file so that it can give way to a shared package without touching the
// rest of the adapter.

import (
	"errors"
	"time"

	"github.com/idemgo/idem"
)

// errNoScope is New's error when neither WithScope nor WithSharedScope was
// given.
var errNoScope = errors.New("idemnats: New: no scope decision: pass WithScope to keep each tenant's keys apart " +
	"(a function naming the tenant of a message, from its subject or a header the publisher cannot forge), " +
	"or WithSharedScope if every publisher on this stream is trusted with every other's keys. " +
	"Without a scope, a publisher that sends another tenant's key makes the consumer ack that tenant's message " +
	"as a duplicate without handling it, or hand it the other tenant's stored outcome")

// scopeDecision checks that exactly one scope decision was made.
func scopeDecision(scoped, shared bool) error {
	switch {
	case scoped && shared:
		return errors.New("idemnats: New: WithScope and WithSharedScope both given: choose one")
	case !scoped && !shared:
		return errNoScope
	}
	return nil
}

// Reason says why a message was dead-lettered. It is the value of the
// [ReasonHeader] header of a dead letter and of [Event.Reason].
type Reason string

// The reasons a message is dead-lettered.
const (
	// ReasonPermanent: the handler returned an error marked with
	// [idem.Permanent], now or on an earlier delivery of the same key.
	ReasonPermanent Reason = "permanent"
	// ReasonTooManyAttempts: the key was claimed more than the Guard's
	// Config.MaxAttempts times without an outcome ([idem.ErrTooManyAttempts]).
	ReasonTooManyAttempts Reason = "too-many-attempts"
	// ReasonMissingKey: the message carries no key ([ErrNoKey]) and
	// [WithUnkeyed] says to dead-letter it, as it does by default.
	ReasonMissingKey Reason = "missing-key"
	// ReasonInvalidKey: the key cannot be used ([KeyError]: empty, sent more
	// than once, the key function failed), or the Guard refused it (too
	// long, Config.ValidateKey).
	ReasonInvalidKey Reason = "invalid-key"
	// ReasonKeyReused: the key was first used with a different payload
	// ([idem.ErrKeyReused]).
	ReasonKeyReused Reason = "key-reused"
)

// action is how a delivery is settled.
type action uint8

const (
	actAck        action = iota + 1 // the outcome is stored, or was already: Ack
	actRetry                        // deliver again after a delay: NakWithDelay
	actDeadLetter                   // never deliver again: dead-letter, Term
)

// verdict is the policy's answer for one delivery.
type verdict struct {
	action action
	delay  time.Duration // actRetry
	busy   bool          // actRetry because another holder has the key
	reason Reason        // actDeadLetter
	cause  error
}

// judge maps what the Guard answered for a delivery to a verdict. An
// outcome that could not be stored is never acked nor dead-lettered: the
// message comes back, and its next delivery finds the stored outcome, or
// takes the key over once the lease ends.
func judge(err error, busyDelay, retryDelay time.Duration) verdict {
	switch {
	case err == nil:
		return verdict{action: actAck}
	case errors.Is(err, idem.ErrStoreUnavailable), errors.Is(err, idem.ErrLeaseLost):
		return verdict{action: actRetry, delay: retryDelay, cause: err}
	case errors.Is(err, idem.ErrInProgress):
		return verdict{action: actRetry, delay: busyDelay, busy: true, cause: err}
	case errors.Is(err, idem.ErrTooManyAttempts):
		return verdict{action: actDeadLetter, reason: ReasonTooManyAttempts, cause: err}
	case idem.IsPermanent(err):
		return verdict{action: actDeadLetter, reason: ReasonPermanent, cause: err}
	case errors.Is(err, idem.ErrKeyReused):
		return verdict{action: actDeadLetter, reason: ReasonKeyReused, cause: err}
	case errors.Is(err, idem.ErrInvalidKey):
		return verdict{action: actDeadLetter, reason: ReasonInvalidKey, cause: err}
	}
	return verdict{action: actRetry, delay: retryDelay, cause: err}
}
