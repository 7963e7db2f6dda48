package idemsqs

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
	// EventStarted: Run read the queue's attributes (and the dead-letter
	// queue's) and receives.
	EventStarted EventKind = iota + 1
	// EventReceiveFailed: a ReceiveMessage failed (Err); the consumer
	// tries again after a backoff.
	EventReceiveFailed
	// EventDeleted: the handler's outcome is stored, or was stored before
	// (Replayed), and the message was deleted.
	EventDeleted
	// EventDelayed: the message was made visible again after Delay
	// (ChangeMessageVisibility): its key was busy (Err wraps
	// idem.ErrInProgress), its handler failed (Err: the handler's error),
	// the store failed, or the consumer stops (Delay 0).
	EventDelayed
	// EventDeadLettered: the message is poison (Reason, Err: the cause);
	// its dead letter was sent to the WithDeadLetter queue, and the
	// message deleted.
	EventDeadLettered
	// EventRedriven: the message is poison (Reason, Err) and was left to
	// the queue's redrive policy (WithRedrivePolicy): visible again after
	// Delay, until SQS moves it.
	EventRedriven
	// EventDiscarded: the message is poison (Reason, Err) and was deleted
	// without a dead letter: under WithDiscardPoison, or after SQS refused
	// its dead letter WithMaxAttempts times (BrokerErr: the last refusal;
	// the message is then left to the queue's redrive policy if it has
	// one).
	EventDiscarded
	// EventUnsettled: the message's delete or visibility change failed
	// (Err: SQS's error, such as ReceiptHandleIsInvalid once its
	// visibility ended); SQS delivers it again, and the store answers that
	// delivery.
	EventUnsettled
	// EventDeadLetterFailed: a poison message's dead letter was not taken
	// (BrokerErr: SQS's error); Refused tells an answer of SQS (the queue
	// does not exist, access denied) from no answer. The consumer tries
	// again, and gives up after WithMaxAttempts refusals (EventDiscarded).
	EventDeadLetterFailed
)

var eventNames = [...]string{"", "started", "receive_failed", "deleted", "delayed", "dead_lettered", "redriven", "discarded", "unsettled", "dead_letter_failed"}

// String returns the kind's name in snake case, for metric labels.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is something a [Consumer] did, reported to its observer.
type Event struct {
	Kind         EventKind
	Queue        string          // the queue's URL
	Scope        string          // the message's scope ("" for EventStarted, EventReceiveFailed)
	Key          string          // the message's idempotency key
	MessageID    string          // SQS's id of the message
	ReceiveCount int             // its ApproximateReceiveCount
	Replayed     bool            // EventDeleted: the outcome was stored before; the handler did not run
	Delay        time.Duration   // EventDelayed, EventRedriven: how long until it is visible again
	Duration     time.Duration   // from receipt to settlement
	Reason       consumer.Reason // EventDeadLettered, EventRedriven, EventDiscarded: why the message is poison
	Err          error           // the cause, for the kinds that have one
	BrokerErr    error           // EventDiscarded, EventDeadLetterFailed: SQS's (last) error on the dead letter
	Refused      bool            // EventDeadLetterFailed: SQS answered no, rather than not at all
}

// Activity returns e in the terms every consumer shares, for
// instrumentation (idemotel): System "aws_sqs", Destination the queue's
// URL, no lag; EventDeleted is ActivityProcessed, EventDelayed
// ActivityRetried (ActivityBusy for a busy key), EventRedriven and
// EventDiscarded ActivityDiscarded, EventUnsettled ActivityRetried,
// EventDeadLetterFailed ActivityDeadLetterFailed.
func (e Event) Activity() consumer.Activity {
	a := consumer.Activity{System: "aws_sqs", Destination: e.Queue, Reason: e.Reason, Err: e.Err, Duration: e.Duration}
	kind := activities[e.Kind]
	if e.Kind == EventDelayed && errors.Is(e.Err, idem.ErrInProgress) {
		kind = consumer.ActivityBusy
	}
	a = chassis.Activity(a, kind, e.Replayed, e.BrokerErr)
	a.Refused = e.Refused
	return a
}

// activities are the kinds of activity of the events about a message; the
// others are consumer.ActivityOther.
var activities = map[EventKind]consumer.ActivityKind{
	EventDeleted:      consumer.ActivityProcessed,
	EventDelayed:      consumer.ActivityRetried,
	EventUnsettled:    consumer.ActivityRetried,
	EventDeadLettered: consumer.ActivityDeadLettered,
	EventRedriven:     consumer.ActivityDiscarded,
	EventDiscarded:    consumer.ActivityDiscarded,

	EventDeadLetterFailed: consumer.ActivityDeadLetterFailed,
}
