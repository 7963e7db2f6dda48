package idemnats

import (
	"fmt"
	"time"
)

// EventKind names what an [Event] reports.
type EventKind uint8

// The events a [Consumer] reports to its observer ([WithObserver]).
const (
	// EventAcked: the handler's outcome is stored, or was stored before
	// (Replayed), and the message was acked.
	EventAcked EventKind = iota + 1
	// EventDelayed: the key was busy (another consumer holds it); the
	// message was naked to come back after Delay.
	EventDelayed
	// EventRequeued: the message was naked to come back after Delay (Err:
	// the handler's retryable error or panic, the store's error, a lost
	// lease, the consumer stopping, or a dead letter that could not be
	// published, with BrokerErr saying why).
	EventRequeued
	// EventDeadLettered: the message was published to the dead-letter
	// subject, if any, and terminated (Err: the cause; Reason).
	EventDeadLettered
	// EventInProgress: InProgress was sent for a message still being
	// handled, or waiting its turn in its batch, so that JetStream does not
	// redeliver it when AckWait passes.
	EventInProgress
)

var eventNames = [...]string{"", "acked", "delayed", "requeued", "dead_lettered", "in_progress"}

// String returns the kind's name in snake case, for metric labels.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is something a [Consumer] did with a message, reported to its
// observer.
type Event struct {
	Kind      EventKind
	Stream    string        // the stream the message is stored in
	Sequence  uint64        // its stream sequence
	Delivered uint64        // how many times JetStream delivered it, this time included
	Subject   string        // the subject it was published to
	Scope     string        // the message's scope; unset for EventInProgress
	Key       string        // its idempotency key; unset for EventInProgress
	Replayed  bool          // EventAcked: the outcome was stored before; the handler did not run
	Delay     time.Duration // EventDelayed, EventRequeued: how long until it is delivered again
	Duration  time.Duration // from receipt to settlement
	// Reason is why the message was dead-lettered: set for
	// EventDeadLettered, and for the EventRequeued of poison whose dead
	// letter could not be published.
	Reason Reason
	Err    error // the cause, for the kinds that have one
	// BrokerErr is the error of the broker call that carried the event
	// (Ack, Nak, Term, InProgress, the dead letter's publish). A message
	// whose ack was lost is redelivered, and acked as a duplicate.
	BrokerErr error
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

// kind returns the event kind of a verdict.
func (v verdict) kind() EventKind {
	switch {
	case v.action == actAck:
		return EventAcked
	case v.action == actDeadLetter:
		return EventDeadLettered
	case v.busy:
		return EventDelayed
	}
	return EventRequeued
}
