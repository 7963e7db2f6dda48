package consume

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/chassis"
)

// EventKind says what an [Event] reports.
type EventKind uint8

// The kinds of [Event].
const (
	// EventAssigned: a partition was assigned to this member.
	EventAssigned EventKind = iota + 1
	// EventRevoked: a partition was revoked: its handlers stopped, its
	// offset committed.
	EventRevoked
	// EventLost: a partition was lost (the member fell out of the group):
	// its handlers stopped.
	EventLost
	// EventBatch: records of a partition were finished: Records, Offset
	// (the next), Lag (high watermark − Offset), Replayed, Duration.
	EventBatch
	// EventRetry: a record could not be finished and waits Delay before
	// it is tried again, alone, in its place: Offset, Key, Err (the
	// handler's error, the store's, or idem.ErrInProgress for a busy key).
	EventRetry
	// EventDeadLettered: a record is poison (Reason, Err: the cause); its
	// dead letter was produced to the WithDeadLetter topic and
	// acknowledged, and its offset is done.
	EventDeadLettered
	// EventDiscarded: a record is poison (Reason, Err: the cause) and its
	// offset is done without a dead letter: under WithDiscardPoison, or
	// after the broker refused its dead letter WithMaxAttempts times
	// (BrokerErr: the last refusal).
	EventDiscarded
	// EventCommit: a partition's offset was committed to Kafka: Offset
	// (the next), Err.
	EventCommit
)

var eventNames = [...]string{"", "assigned", "revoked", "lost", "batch", "retry", "dead_lettered", "discarded", "commit"}

// String returns the kind's name in snake case, for metric labels.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "unknown"
}

// Event is what a consumer reports to its observer (idemkafka.WithObserver).
type Event struct {
	Kind      EventKind
	Topic     string
	Partition int32
	// Offset: EventBatch and EventCommit, the next offset of the partition
	// (one past its last finished record); EventRetry, EventDeadLettered
	// and EventDiscarded, the record's.
	Offset int64
	// Lag (EventBatch): the partition's high watermark at its last fetch
	// minus Offset: records produced and not finished yet.
	Lag      int64
	Records  int           // EventBatch: records finished
	Replayed int           // EventBatch: of those, duplicates whose outcome was already stored
	Delay    time.Duration // EventRetry: the pause before the next try
	Duration time.Duration // EventBatch: how long the records took
	// Key (EventRetry, EventDeadLettered, EventDiscarded) is the record's
	// idempotency key, when it had a usable one.
	Key string
	// Reason (EventDeadLettered, EventDiscarded) is why the record is
	// poison.
	Reason consumer.Reason
	// Err: EventRetry and EventCommit, the error; EventDeadLettered and
	// EventDiscarded, the cause.
	Err error
	// BrokerErr (EventDiscarded): the broker's last refusal of the dead
	// letter, when the consumer gave up on it.
	BrokerErr error
}

// Activity returns e in the terms every consumer shares, for
// instrumentation (idemotel): System "kafka", Destination the topic,
// Partition the partition; EventBatch is ActivityProcessed with its Lag,
// EventRetry ActivityBusy (a busy key) or ActivityRetried, EventRevoked and
// EventLost ActivityReleased.
func (e Event) Activity() consumer.Activity {
	a := consumer.Activity{System: "kafka", Destination: e.Topic, Partition: strconv.Itoa(int(e.Partition)),
		Reason: e.Reason, Err: e.Err, Duration: e.Duration}
	kind := activities[e.Kind]
	if e.Kind == EventRetry && errors.Is(e.Err, idem.ErrInProgress) {
		kind = consumer.ActivityBusy
	}
	a = chassis.Activity(a, kind, false, e.BrokerErr)
	if e.Kind == EventBatch {
		a.Messages, a.Replayed, a.Lag, a.LagKnown = e.Records, e.Replayed, e.Lag, true
	}
	return a
}

// activities are the kinds of activity of the kinds of event; the others
// are consumer.ActivityOther.
var activities = map[EventKind]consumer.ActivityKind{
	EventBatch:        consumer.ActivityProcessed,
	EventRetry:        consumer.ActivityRetried,
	EventDeadLettered: consumer.ActivityDeadLettered,
	EventDiscarded:    consumer.ActivityDiscarded,
	EventRevoked:      consumer.ActivityReleased,
	EventLost:         consumer.ActivityReleased,
}

func (c *Consumer) observe(ctx context.Context, e Event) {
	if c.o.Observer != nil {
		c.o.Observe(ctx, func() { c.o.Observer(ctx, e) })
	}
}
