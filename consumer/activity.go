package consumer

import "time"

// ActivityKind says what an [Activity] reports.
type ActivityKind uint8

// The kinds of [Activity].
const (
	// ActivityOther: nothing a message counter counts (a connection, an
	// assignment, a commit, a progress signal); Lag may still be known.
	ActivityOther ActivityKind = iota
	// ActivityProcessed: Messages were finished and acknowledged (or their
	// offsets done): their outcome was stored now, or before (Replayed).
	ActivityProcessed
	// ActivityBusy: a message waits for another consumer that holds its
	// key, and will be tried again.
	ActivityBusy
	// ActivityRetried: a message will be tried again (delivered again, or
	// retried in place): the handler's error or panic, the store's error,
	// a lost lease, a shutdown, a settlement that did not reach the
	// broker (Err).
	ActivityRetried
	// ActivityDeadLettered: a message is poison (Reason, Err) and its dead
	// letter was stored by the broker.
	ActivityDeadLettered
	// ActivityDiscarded: a message is poison (Reason, Err) and was settled
	// without a dead letter: under WithDiscardPoison, or, with GaveUp,
	// after the broker refused its dead letter MaxAttempts times.
	ActivityDiscarded
	// ActivityReleased: the consumer stopped reading Partition (a Kafka
	// partition revoked or lost); its lag is no longer this consumer's.
	ActivityReleased
	// ActivityDeadLetterFailed: a poison message's dead letter was not
	// taken (Err: the broker's error), and the message waits while it is
	// sent again: Refused when the broker answered no (the destination
	// does not exist, or may not be written; given up after MaxAttempts
	// refusals, ActivityDiscarded), else the broker could not be reached
	// (tried without end). One per try.
	ActivityDeadLetterFailed
)

var activityNames = [...]string{"other", "processed", "busy", "retried", "dead_lettered", "discarded", "released", "dead_letter_failed"}

// String returns the kind's name in snake case, for metric labels.
func (k ActivityKind) String() string {
	if int(k) < len(activityNames) {
		return activityNames[k]
	}
	return "unknown"
}

// Activity is a consumer's event in the terms every broker shares, for
// instrumentation that should not depend on the consumers' modules (such as
// idemotel's metrics): each consumer's Event has an Activity method. Its
// names are few (a topic, a stream, a queue, a partition), never a
// message's key or subject.
type Activity struct {
	Kind ActivityKind
	// System is the broker, as OpenTelemetry's messaging.system names it:
	// "kafka", "nats", "rabbitmq".
	System string
	// Destination is where the messages were read from: the Kafka topic,
	// the JetStream stream, the RabbitMQ queue.
	Destination string
	// Group is the consumer group, when the event names it: the JetStream
	// consumer. Kafka's events do not (the group is the kgo client's).
	Group string
	// Partition is the Kafka partition, in decimal; "" elsewhere.
	Partition string
	// Messages is how many messages the activity is about: one, or a
	// Kafka batch's records (ActivityProcessed); 0 for ActivityOther and
	// ActivityReleased.
	Messages int
	// Replayed (ActivityProcessed) is how many of Messages were
	// duplicates answered from their stored outcome: their handler did not
	// run.
	Replayed int
	// Lag, when LagKnown, is how many messages wait to be consumed
	// after this activity: Kafka's high watermark at the last fetch minus
	// the next offset; JetStream's pending count when the message was
	// delivered.
	Lag      int64
	LagKnown bool
	// Reason (ActivityDeadLettered, ActivityDiscarded) is why the message
	// is poison.
	Reason Reason
	// GaveUp (ActivityDiscarded): the broker refused the dead letter; the
	// message was settled without it.
	GaveUp bool
	// Refused (ActivityDeadLetterFailed): the broker answered no; false
	// when it could not be reached.
	Refused bool
	// Err is the cause, for the kinds that have one.
	Err error
	// Duration is how long the messages took, from receipt to settlement
	// (a Kafka batch: from its first record's start), when known.
	Duration time.Duration
}
