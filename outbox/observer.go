package outbox

import (
	"context"
	"fmt"
	"time"
)

// Op names what a [Relay] reports to an [Observer].
type Op uint8

// The events an [Observer] sees.
const (
	// OpPublish: a batch was handed to the Publisher. Event.Sent messages
	// were accepted and Event.Failed were not (Event.Err says why), of
	// which Event.Unavailable because the broker could not be reached (see
	// [Unavailable]: no attempt counted); Event.Duration is the Publish
	// call's.
	OpPublish Op = iota + 1
	// OpBackoff: nothing of a batch was published because the broker
	// could not be reached (or the Publish call failed as a whole); the
	// relay waits Event.Duration before trying again (Event.Err is the
	// first failure). A batch the broker refused, message by message, makes
	// no OpBackoff: those rows wait out their own backoffs, the relay
	// does not.
	OpBackoff
	// OpLag: the outbox's backlog, sampled every RelayConfig.LagInterval:
	// Event.Pending messages wait, the oldest for Event.OldestPending, and
	// Event.Dead rows are dead.
	OpLag
	// OpRebalance: the relay now holds Event.Partitions (sorted), of
	// Event.Members relays sharing the table.
	OpRebalance
	// OpCleanup: Event.Deleted sent rows past the retention were deleted
	// (Event.Err if the clean-up failed).
	OpCleanup
	// OpDisconnect: the relay's database session failed (Event.Err); it
	// lost its partitions and reconnects after Event.Duration.
	OpDisconnect
	// OpDead: Event.Dead rows were moved to the dead rows (see [Dead]),
	// for a permanent error ([Permanent]) or after RelayConfig.MaxAttempts
	// failed publications; Event.Err is the first one's last error. The
	// later messages of their keys are published without them.
	OpDead
)

var opNames = [...]string{"", "publish", "backoff", "lag", "rebalance", "cleanup", "disconnect", "dead"}

// String returns the event's name in snake case, for metric labels.
func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Event is what a [Relay] reports to an [Observer]; which fields are set
// depends on Op.
type Event struct {
	Op            Op
	Table         string // the outbox table, as configured
	Sent          int
	Failed        int
	Unavailable   int // OpPublish: of Failed, those the broker was unavailable for
	Deleted       int
	Dead          int // OpDead: rows moved to the dead rows; OpLag: dead rows in all
	Pending       int64
	OldestPending time.Duration
	Partitions    []int
	Members       int
	Duration      time.Duration
	Err           error
}

// Observer receives a [Relay]'s events, for metrics and logs; see
// RelayConfig.Observer. It runs on the relay's goroutine: keep it fast.
type Observer func(ctx context.Context, e Event)

// Lag is the backlog of an outbox table; see [Relay.Lag].
type Lag struct {
	Pending       int64         // messages not yet published
	OldestPending time.Duration // age of the oldest of them, by the database's clock; 0 if none
	Dead          int64         // dead rows, waiting for an operator (see [Dead])
}
