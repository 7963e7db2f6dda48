package idemamqp

import (
	"fmt"
	"time"
)

// EventKind names what an [Event] reports.
type EventKind uint8

// The events a [Consumer] reports to its observer ([WithObserver]).
const (
	// EventConnected: a connection is up and the consumer subscribed.
	EventConnected EventKind = iota + 1
	// EventDisconnected: the connection or a channel dropped, or the
	// subscription was cancelled (Err says why); the consumer reconnects.
	EventDisconnected
	// EventAcked: the handler's outcome is stored, or was stored before
	// (Replayed), and the delivery was acked.
	EventAcked
	// EventDelayed: the key was busy; a copy of the delivery went to the
	// delay queue, to come back after Delay, and the delivery was acked.
	EventDelayed
	// EventRequeued: the delivery was held for Delay (the retry delay, or
	// the busy delay without a delay queue; less when the consumer stops)
	// and then nacked with requeue (Err: the handler's retryable error,
	// the store's, or ErrInProgress).
	EventRequeued
	// EventDeadLettered: the delivery was rejected without requeue, or
	// published to the WithDeadLetter exchange (Err: the cause).
	EventDeadLettered
	// EventUnsettled: the delivery's channel closed before it could be
	// settled (Err); the broker delivers it again.
	EventUnsettled
)

var eventNames = [...]string{"", "connected", "disconnected", "acked", "delayed", "requeued", "dead_lettered", "unsettled"}

// String returns the kind's name in snake case, for metric labels.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is something a [Consumer] did, reported to its observer.
type Event struct {
	Kind        EventKind
	Queue       string
	Scope       string        // the delivery's scope ("" for connection events)
	Key         string        // the delivery's idempotency key
	DeliveryTag uint64        // on the channel it came from
	Redelivered bool          // the broker had delivered it before
	Replayed    bool          // EventAcked: the outcome was stored before; the handler did not run
	Delay       time.Duration // EventDelayed: the busy delay; EventRequeued: how long it was held
	Duration    time.Duration // from receipt to settlement
	Reason      Reason        // EventDeadLettered: why
	Err         error         // the cause, for the kinds that have one
}

// Reason says why a delivery was dead-lettered. It is the value of the
// [ReasonHeader] header of a dead letter published by [WithDeadLetter],
// and of [Event.Reason].
type Reason string

// The reasons a delivery is dead-lettered.
const (
	// ReasonPermanent: the handler returned an error marked with
	// [idem.Permanent], now or on an earlier delivery of the same key.
	ReasonPermanent Reason = "permanent"
	// ReasonTooManyAttempts: the key was claimed more than the Guard's
	// Config.MaxAttempts times without an outcome ([idem.ErrTooManyAttempts]).
	ReasonTooManyAttempts Reason = "too-many-attempts"
	// ReasonMissingKey: the delivery carries no key ([ErrNoKey]) and
	// [WithUnkeyed] says to dead-letter it, as it does by default.
	ReasonMissingKey Reason = "missing-key"
	// ReasonInvalidKey: the key cannot be used ([KeyError]: empty, not a
	// string, the key function failed), or the Guard refused it (too long,
	// Config.ValidateKey).
	ReasonInvalidKey Reason = "invalid-key"
	// ReasonKeyReused: the key was first used with a different payload
	// ([idem.ErrKeyReused]).
	ReasonKeyReused Reason = "key-reused"
)
