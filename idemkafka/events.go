package idemkafka

import "github.com/idemgo/idem/idemkafka/internal/consume"

// Event is what a consumer reports to its observer ([WithObserver]): its
// Kind, the partition, and the Offset, Lag, Records, Delay, Duration and
// Err that kind fills in (see the constants).
type Event = consume.Event

// EventKind says what an [Event] reports.
type EventKind = consume.EventKind

// The kinds of [Event].
const (
	EventAssigned   = consume.EventAssigned   // a partition was assigned to this member
	EventRevoked    = consume.EventRevoked    // a partition was revoked: its handlers stopped, its offset committed
	EventLost       = consume.EventLost       // a partition was lost (the member fell out of the group): its handlers stopped
	EventBatch      = consume.EventBatch      // records finished: Records, Offset (the next), Lag (high watermark − Offset), Replayed
	EventRetry      = consume.EventRetry      // a record could not be finished and waits Delay: Offset, Err
	EventDeadLetter = consume.EventDeadLetter // a record went to the dead-letter topic: Offset, Err (the cause)
	EventCommit     = consume.EventCommit     // a partition's offset was committed to Kafka: Offset (the next), Err
)

// The headers a dead letter carries besides the original record's.
const (
	HeaderDeadLetterCause     = consume.HeaderCause     // the error that made it a dead letter, at most 1 KiB
	HeaderDeadLetterReason    = consume.HeaderReason    // why, in a word: permanent, too-many-attempts, missing-key, invalid-key, key-reused
	HeaderDeadLetterTopic     = consume.HeaderTopic     // the original topic
	HeaderDeadLetterPartition = consume.HeaderPartition // the original partition, in decimal
	HeaderDeadLetterOffset    = consume.HeaderOffset    // the original offset, in decimal
	HeaderDeadLetterKey       = consume.HeaderKey       // the idempotency key, when the record had one
)

// Errors of the consumer. Check them with errors.Is.
var (
	// ErrNoKey is the dead-letter cause of a record without an idempotency
	// key; a key function returns it for such a record.
	ErrNoKey = consume.ErrNoKey
	// ErrBadKey is the dead-letter cause of a record whose key cannot be
	// read (the key function failed, or two key headers disagree).
	ErrBadKey = consume.ErrBadKey
	// ErrRevoked is the cause of a handler context cancelled because its
	// partition was revoked.
	ErrRevoked = consume.ErrRevoked
	// ErrLost is the cause of a handler context cancelled because its
	// partition was lost.
	ErrLost = consume.ErrLost
	// ErrShutdown is the cause of a handler context cancelled because the
	// consumer shut down and the drain timeout passed.
	ErrShutdown = consume.ErrShutdown
)
