package idemnats

// This file is the adapter policy every idem consumer adapter shares: the
// scope decision, and what a delivery's outcome means for the broker (ack,
// redeliver after a delay, or dead-letter with a cause). It is kept in this
// one file so that it can give way to a shared package without touching the
// rest of the adapter.

import (
	"errors"
	"fmt"
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

// Reason says why a message was dead-lettered. It is the value of the
// [HeaderReason] header of a dead letter and of [Event.Reason].
type Reason string

// The reasons a message is dead-lettered.
const (
	// ReasonPermanent: the handler returned an error marked with
	// [idem.Permanent], now or on an earlier delivery of the same key.
	ReasonPermanent Reason = "permanent"
	// ReasonTooManyAttempts: the key was claimed more than the Guard's
	// Config.MaxAttempts times without an outcome ([idem.ErrTooManyAttempts]).
	ReasonTooManyAttempts Reason = "too-many-attempts"
	// ReasonMissingKey: the message carries no key and [WithUnkeyed] was not
	// given.
	ReasonMissingKey Reason = "missing-key"
	// ReasonInvalidKey: the key is too long, refused by the Guard's key
	// validation, sent more than once, or the key function failed.
	ReasonInvalidKey Reason = "invalid-key"
	// ReasonKeyReused: the key was first used with a different payload
	// ([idem.ErrKeyReused]).
	ReasonKeyReused Reason = "key-reused"
)

// Action is what the consumer did with a delivery; see [Event].
type Action uint8

// The actions on a delivery.
const (
	// ActionAck: the outcome is stored, or the delivery was a duplicate of
	// a stored outcome. Acked.
	ActionAck Action = iota + 1
	// ActionRetry: no outcome yet (the key is busy, the handler failed with
	// a retryable error, the store failed, the consumer is stopping).
	// Redelivered after Event.Delay (NakWithDelay; Nak when zero).
	ActionRetry
	// ActionDeadLetter: poison. Published to the dead-letter subject, if
	// any, and terminated (Term): never redelivered.
	ActionDeadLetter
	// ActionInProgress: the message is still being worked on (or waits its
	// turn in its batch); InProgress was sent so that JetStream does not
	// redeliver it when AckWait passes.
	ActionInProgress
)

var actionNames = [...]string{"", "ack", "retry", "dead_letter", "in_progress"}

// String returns the action's name in snake case, for metric labels.
func (a Action) String() string {
	if int(a) < len(actionNames) && a != 0 {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// verdict is the policy's answer for one delivery.
type verdict struct {
	action Action
	delay  time.Duration // ActionRetry
	reason Reason        // ActionDeadLetter
	cause  error
}

// judge maps what the Guard answered for a delivery to a verdict. An
// outcome that could not be stored is never acked nor dead-lettered: the
// message comes back, and its next delivery finds the stored outcome, or
// takes the key over once the lease ends.
func judge(err error, busyDelay, retryDelay time.Duration) verdict {
	switch {
	case err == nil:
		return verdict{action: ActionAck}
	case errors.Is(err, idem.ErrStoreUnavailable), errors.Is(err, idem.ErrLeaseLost):
		return verdict{action: ActionRetry, delay: retryDelay, cause: err}
	case errors.Is(err, idem.ErrInProgress):
		return verdict{action: ActionRetry, delay: busyDelay, cause: err}
	case errors.Is(err, idem.ErrTooManyAttempts):
		return verdict{action: ActionDeadLetter, reason: ReasonTooManyAttempts, cause: err}
	case idem.IsPermanent(err):
		return verdict{action: ActionDeadLetter, reason: ReasonPermanent, cause: err}
	case errors.Is(err, idem.ErrKeyReused):
		return verdict{action: ActionDeadLetter, reason: ReasonKeyReused, cause: err}
	case errors.Is(err, idem.ErrInvalidKey):
		return verdict{action: ActionDeadLetter, reason: ReasonInvalidKey, cause: err}
	}
	return verdict{action: ActionRetry, delay: retryDelay, cause: err}
}
