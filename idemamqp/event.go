package idemamqp

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/chassis"
)

// EventKind names what an [Event] reports.
type EventKind uint8

// The events a [Consumer] reports to its observer ([WithObserver]).
const (
	// EventConnected: a connection is up and the consumer subscribed.
	EventConnected EventKind = iota + 1
	// EventDisconnected: the connection or the consuming channel dropped,
	// or the subscription was cancelled (Err says why); the consumer
	// reconnects.
	EventDisconnected
	// EventAcked: the handler's outcome is stored, or was stored before
	// (Replayed), and the delivery was acked.
	EventAcked
	// EventDelayed: the key was busy; a copy of the delivery went to the
	// delay queue, to come back after Delay, and the delivery was acked.
	EventDelayed
	// EventRequeued: the delivery was held for Delay (the retry backoff,
	// or the busy delay without a delay queue; less when the consumer
	// stops) and then nacked with requeue (Err: the handler's error, the
	// store's, or ErrInProgress).
	EventRequeued
	// EventDeadLettered: the delivery is poison (Reason, Err: the cause);
	// its dead letter was published to the WithDeadLetter exchange and
	// confirmed, and the delivery was acked.
	EventDeadLettered
	// EventDiscarded: the delivery is poison (Reason, Err: the cause) and
	// was rejected without requeue, to the queue's own dead-letter
	// exchange if it has one: under WithDiscardPoison, or after the broker
	// refused its dead letter WithMaxAttempts times (BrokerErr: the last
	// refusal).
	EventDiscarded
	// EventUnsettled: the delivery's channel closed before it could be
	// settled (Err); the broker delivers it again.
	EventUnsettled
)

var eventNames = [...]string{"", "connected", "disconnected", "acked", "delayed", "requeued", "dead_lettered", "discarded", "unsettled"}

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
	Scope       string          // the delivery's scope ("" for connection events)
	Key         string          // the delivery's idempotency key
	DeliveryTag uint64          // on the channel it came from
	Redelivered bool            // the broker had delivered it before
	Replayed    bool            // EventAcked: the outcome was stored before; the handler did not run
	Delay       time.Duration   // EventDelayed: the busy delay; EventRequeued: how long it was held
	Duration    time.Duration   // from receipt to settlement
	Reason      consumer.Reason // EventDeadLettered, EventDiscarded: why the delivery is poison
	Err         error           // the cause, for the kinds that have one
	BrokerErr   error           // EventDiscarded: the broker's last refusal of the dead letter
}

// Activity returns e in the terms every consumer shares, for
// instrumentation (idemotel): System "rabbitmq", Destination the queue, no
// lag (a delivery does not tell it); EventAcked is ActivityProcessed,
// EventDelayed ActivityBusy, EventRequeued (ActivityBusy for a busy key)
// and EventUnsettled ActivityRetried.
func (e Event) Activity() consumer.Activity {
	a := consumer.Activity{System: "rabbitmq", Destination: e.Queue, Reason: e.Reason, Err: e.Err, Duration: e.Duration}
	kind := activities[e.Kind]
	if e.Kind == EventRequeued && errors.Is(e.Err, idem.ErrInProgress) {
		kind = consumer.ActivityBusy // held for the busy delay, without a delay queue
	}
	return chassis.Activity(a, kind, e.Replayed, e.BrokerErr)
}

// activities are the kinds of activity of the events about a delivery;
// the others are consumer.ActivityOther.
var activities = map[EventKind]consumer.ActivityKind{
	EventAcked:        consumer.ActivityProcessed,
	EventDelayed:      consumer.ActivityBusy,
	EventRequeued:     consumer.ActivityRetried,
	EventUnsettled:    consumer.ActivityRetried,
	EventDeadLettered: consumer.ActivityDeadLettered,
	EventDiscarded:    consumer.ActivityDiscarded,
}
