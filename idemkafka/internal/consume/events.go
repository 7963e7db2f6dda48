package consume

import (
	"context"
	"time"

	"github.com/idemgo/idem/consumer"
)

// EventKind says what an [Event] reports. idemkafka's EventKind has the
// same values.
type EventKind uint8

// The kinds of [Event], in idemkafka's order.
const (
	EventAssigned EventKind = iota + 1
	EventRevoked
	EventLost
	EventBatch
	EventRetry
	EventDeadLettered
	EventDiscarded
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

// Event is what a consumer reports to its observer: idemkafka's Event,
// field for field (see there).
type Event struct {
	Kind      EventKind
	Topic     string
	Partition int32
	Offset    int64
	Lag       int64
	Records   int
	Replayed  int
	Delay     time.Duration
	Duration  time.Duration
	Key       string
	Reason    consumer.Reason
	Err       error
	BrokerErr error
}

func (c *Consumer) observe(ctx context.Context, e Event) {
	if c.o.Observer != nil {
		c.o.Observer(ctx, e)
	}
}
