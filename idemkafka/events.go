package idemkafka

import (
	"github.com/idemgo/idem/idemkafka/internal/consume"
)

// EventKind says what an [Event] reports; its String is the kind's name
// in snake case, for metric labels.
type EventKind = consume.EventKind

// The kinds of [Event].
const (
	// EventAssigned: a partition was assigned to this member.
	EventAssigned = consume.EventAssigned
	// EventRevoked: a partition was revoked: its handlers stopped, its
	// offset committed.
	EventRevoked = consume.EventRevoked
	// EventLost: a partition was lost (the member fell out of the group):
	// its handlers stopped.
	EventLost = consume.EventLost
	// EventBatch: records of a partition were finished: Records, Offset
	// (the next), Lag (high watermark − Offset), Replayed, Duration.
	EventBatch = consume.EventBatch
	// EventRetry: a record could not be finished and waits Delay before
	// it is tried again, alone, in its place: Offset, Key, Err (the
	// handler's error, the store's, or idem.ErrInProgress for a busy key).
	EventRetry = consume.EventRetry
	// EventDeadLettered: a record is poison (Reason, Err: the cause); its
	// dead letter was produced to the WithDeadLetter topic and
	// acknowledged, and its offset is done.
	EventDeadLettered = consume.EventDeadLettered
	// EventDiscarded: a record is poison (Reason, Err: the cause) and its
	// offset is done without a dead letter: under WithDiscardPoison, or
	// after the broker refused its dead letter WithMaxAttempts times
	// (BrokerErr: the last refusal).
	EventDiscarded = consume.EventDiscarded
	// EventCommit: a partition's offset was committed to Kafka: Offset
	// (the next), Err.
	EventCommit = consume.EventCommit
)

// Event is what a consumer reports to its observer ([WithObserver]): its
// Kind, the Topic and Partition, and, as the kind says, the record's
// Offset (or the partition's next), the partition's Lag, the Records
// finished and how many of them were Replayed, the Delay before a retry,
// the Duration of a batch, the record's Key, the Reason it is poison, the
// Err (an error, or the cause), and the broker's refusal of a dead letter
// (BrokerErr). Its Activity method returns it in the terms every consumer
// shares, for instrumentation (idemotel).
type Event = consume.Event

// The headers a dead letter carries besides those of package consumer
// (consumer.HeaderReason, consumer.HeaderCause, …): where the record came
// from.
const (
	HeaderTopic     = consume.HeaderTopic     // "idem-dead-letter-topic": the record's topic
	HeaderPartition = consume.HeaderPartition // "idem-dead-letter-partition": its partition, in decimal
	HeaderOffset    = consume.HeaderOffset    // "idem-dead-letter-offset": its offset, in decimal
)

// Errors a handler's context is cancelled with (context.Cause). Check them
// with errors.Is.
var (
	// ErrRevoked: the handler's partition was revoked.
	ErrRevoked = consume.ErrRevoked
	// ErrLost: the handler's partition was lost.
	ErrLost = consume.ErrLost
	// ErrShutdown: the consumer shut down and the drain timeout passed.
	ErrShutdown = consume.ErrShutdown
)
