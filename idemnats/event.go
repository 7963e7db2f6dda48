package idemnats

import (
	"fmt"
	"math"
	"time"

	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/chassis"
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
	// lease, the consumer stopping; or, with Reason set, poison whose dead
	// letter the consumer stopped trying to publish as it stopped, with
	// BrokerErr saying why).
	EventRequeued
	// EventDeadLettered: the message is poison (Reason, Err: the cause);
	// its dead letter was stored by the stream of the WithDeadLetter
	// subject, and the message terminated.
	EventDeadLettered
	// EventInProgress: InProgress was sent for a message still being
	// handled, or waiting its turn in its batch, so that JetStream does not
	// redeliver it when AckWait passes.
	EventInProgress
	// EventDiscarded: the message is poison (Reason, Err: the cause) and
	// was terminated without a dead letter: under WithDiscardPoison, or
	// after the broker refused its dead letter WithMaxAttempts times
	// (BrokerErr: the last refusal).
	EventDiscarded
)

var eventNames = [...]string{"", "acked", "delayed", "requeued", "dead_lettered", "in_progress", "discarded"}

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
	Consumer  string        // the JetStream consumer that delivered it
	Pending   uint64        // messages left to deliver to that consumer when it was delivered (NumPending): its lag
	Scope     string        // the message's scope; unset for EventInProgress
	Key       string        // its idempotency key; unset for EventInProgress
	Replayed  bool          // EventAcked: the outcome was stored before; the handler did not run
	Delay     time.Duration // EventDelayed, EventRequeued: how long until it is delivered again
	Duration  time.Duration // from receipt to settlement
	// Reason is why the message is poison: set for EventDeadLettered and
	// EventDiscarded, and for the EventRequeued of poison whose dead
	// letter was not published.
	Reason consumer.Reason
	Err    error // the cause, for the kinds that have one
	// BrokerErr is the error of the broker call that carried the event
	// (Ack, Nak, Term, InProgress), or the broker's last refusal of the
	// dead letter (EventDiscarded, EventRequeued). A message whose ack was
	// lost is redelivered, and acked as a duplicate.
	BrokerErr error
}

// Activity returns e in the terms every consumer shares, for
// instrumentation (idemotel): System "nats", Destination the stream, Group
// the JetStream consumer, Lag its Pending count; EventAcked is
// ActivityProcessed, EventDelayed ActivityBusy, EventRequeued
// ActivityRetried.
func (e Event) Activity() consumer.Activity {
	a := consumer.Activity{System: "nats", Destination: e.Stream, Group: e.Consumer, Lag: int64(min(e.Pending, math.MaxInt64)),
		LagKnown: e.Stream != "", Reason: e.Reason, Err: e.Err, Duration: e.Duration}
	return chassis.Activity(a, activities[e.Kind], e.Replayed, e.BrokerErr)
}

// activities are the kinds of activity of the events about a message; the
// others are consumer.ActivityOther.
var activities = map[EventKind]consumer.ActivityKind{
	EventAcked:        consumer.ActivityProcessed,
	EventDelayed:      consumer.ActivityBusy,
	EventRequeued:     consumer.ActivityRetried,
	EventDeadLettered: consumer.ActivityDeadLettered,
	EventDiscarded:    consumer.ActivityDiscarded,
}
