package consume

import (
	"context"
	"time"
)

// EventKind says what an [Event] reports.
type EventKind uint8

// The kinds of [Event].
const (
	EventAssigned   EventKind = iota + 1 // a partition was assigned to this member
	EventRevoked                         // a partition was revoked: its handlers stopped, its offset committed
	EventLost                            // a partition was lost (the member left the group uncleanly): its handlers stopped
	EventBatch                           // records of a partition were finished: Records, Offset (the next), Lag
	EventRetry                           // a record could not be finished and waits Delay: Offset, Err
	EventDeadLetter                      // a record went to the dead-letter topic: Offset, Err (the cause)
	EventCommit                          // a partition's offset was committed to Kafka: Offset (the next), Err
)

var eventNames = [...]string{"", "assigned", "revoked", "lost", "batch", "retry", "dead_letter", "commit"}

// String returns the kind's name in snake case, for metric labels.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "unknown"
}

// Event is what a consumer reports to its observer.
type Event struct {
	Kind      EventKind
	Topic     string
	Partition int32
	// Offset: EventBatch and EventCommit, the next offset of the partition
	// (one past its last finished record); EventRetry and EventDeadLetter,
	// the record's.
	Offset int64
	// Lag (EventBatch): the partition's high watermark at its last fetch
	// minus Offset: records produced and not finished yet.
	Lag      int64
	Records  int           // EventBatch: records finished
	Replayed int           // EventBatch: of those, duplicates whose outcome was already stored
	Delay    time.Duration // EventRetry: the pause before the next try
	Duration time.Duration // EventBatch: how long the records took
	Err      error         // EventRetry, EventCommit: the error; EventDeadLetter: the cause
}

func (c *Consumer) observe(ctx context.Context, e Event) {
	if c.o.Observer != nil {
		c.o.Observer(ctx, e)
	}
}
