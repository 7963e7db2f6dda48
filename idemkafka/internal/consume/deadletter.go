package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/internal/chassis"
)

// The headers a dead letter carries besides those of package consumer:
// where the record came from.
const (
	HeaderTopic     = "idem-dead-letter-topic"     // the record's topic
	HeaderPartition = "idem-dead-letter-partition" // its partition, in decimal
	HeaderOffset    = "idem-dead-letter-offset"    // its offset, in decimal
)

// defaultBatchMaxBytes is franz-go's default kgo.ProducerBatchMaxBytes,
// the size of the largest record a client produces (Kafka's default
// max.message.bytes): the limit of a dead letter when the producing client
// does not tell its own.
const defaultBatchMaxBytes = 1000012

// produceTimeout bounds one try at producing a dead letter, so that a
// broker that cannot be reached is logged and retried, and a shutdown
// noticed, rather than waited on for good.
const produceTimeout = 30 * time.Second

// poison settles the record of it, which must never run again (the
// verdict v): under WithDiscardPoison it is logged and reported; else its
// dead letter is produced to the WithDeadLetter topic (chassis.SendLetter:
// given up on after MaxAttempts refusals, the record done without it;
// tried without end while the broker cannot be reached). It returns nil
// once the record is done, and an error when the partition stops first
// (revoked, lost, shutting down): the record is not done, and its next
// owner handles it again.
func (p *Partition) poison(ctx context.Context, it Item, v chassis.Verdict) error {
	o := &p.c.o
	r := it.Rec
	attrs := append(recordAttrs(r), slog.String("reason", string(v.Reason)), slog.Any("cause", v.Cause))
	if it.KeyOK {
		attrs = append(attrs, slog.String("key", it.Key))
	}
	ev := Event{Kind: EventDeadLettered, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Reason: v.Reason, Err: v.Cause}
	if it.KeyOK {
		ev.Key = it.Key
	}
	pkg := o.Names().Pkg
	if !o.DeadLetters() {
		o.Logger().LogAttrs(ctx, slog.LevelWarn, pkg+": poison discarded (WithDiscardPoison)", attrs...)
		ev.Kind = EventDiscarded
		p.c.observe(ctx, ev)
		return nil
	}
	producer := o.DeadLetterClient
	if producer == nil {
		producer = p.client
	}
	topic := o.DeadLetterTopic
	attrs = append(attrs, slog.String("dead_letter_topic", topic))
	l := letter(it, v)
	l.Fit(batchMaxBytes(producer, topic))
	gaveUp, err := o.SendLetter(ctx, l.Letter, func() (chassis.Refusal, error) {
		pctx, cancel := context.WithTimeout(ctx, produceTimeout)
		defer cancel()
		err := producer.ProduceSync(pctx, l.record(topic)).FirstErr()
		return classify(err), err
	}, p.sleep, attrs)
	switch {
	case err == nil:
		o.Logger().LogAttrs(ctx, slog.LevelWarn, pkg+": poison dead-lettered", attrs...)
	case gaveUp:
		ev.Kind, ev.BrokerErr = EventDiscarded, err
	default:
		return fmt.Errorf("%s: dead letter to %s: %w (the partition stops)", pkg, topic, err)
	}
	p.c.observe(ctx, ev)
	return nil
}

// deadLetter is a dead letter being made: the chassis's Letter of a
// record.
type deadLetter struct{ *chassis.Letter }

// letter returns the dead letter of the record of it, whose verdict is v:
// the record's key, value and headers, the headers of package consumer,
// and [HeaderTopic], [HeaderPartition] and [HeaderOffset].
func letter(it Item, v chassis.Verdict) deadLetter {
	r := it.Rec
	return deadLetter{chassis.NewLetter(r.Key, r.Value, headers(r), v, it.Key, it.KeyOK,
		chassis.Header{Name: HeaderTopic, Value: []byte(r.Topic)},
		chassis.Header{Name: HeaderPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		chassis.Header{Name: HeaderOffset, Value: strconv.AppendInt(nil, r.Offset, 10)})}
}

// record returns the letter as a record for topic.
func (l deadLetter) record(topic string) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(l.Headers)+len(l.Added))
	for _, h := range l.Headers {
		hs = append(hs, kgo.RecordHeader{Key: h.Name, Value: h.Value})
	}
	for _, h := range l.Added {
		hs = append(hs, kgo.RecordHeader{Key: h.Name, Value: h.Value})
	}
	return &kgo.Record{Topic: topic, Key: l.RecordKey, Value: l.Body, Headers: hs}
}

// batchMaxBytes returns the largest record batch cl produces to topic
// (kgo.ProducerBatchMaxBytes, or its function form): a record larger than
// it, less the batch's framing, is failed by the client itself.
func batchMaxBytes(cl *kgo.Client, topic string) int {
	if f, ok := cl.OptValue(kgo.ProducerBatchMaxBytesFn).(func(string) int32); ok && f != nil {
		return int(f(topic))
	}
	if n, ok := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32); ok && n > 0 {
		return int(n)
	}
	return defaultBatchMaxBytes
}

// classify returns what err, ProduceSync's error, says of the dead letter:
// a refusal when the broker answered no (a topic that may not be written,
// an invalid topic name, a topic that does not exist once kgo stopped
// waiting for it, …), or refused it, or the client did, as too large
// (MESSAGE_TOO_LARGE); else the broker could not be reached, or asked to
// try again (a connection that failed, a timeout, a retriable error).
func classify(err error) chassis.Refusal {
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return chassis.RefusedTooLarge
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		// Retriable to Kafka, but kgo returns it only once it gave up
		// waiting for the topic (kgo.UnknownTopicRetries).
		return chassis.Refused
	}
	if ke, ok := errors.AsType[*kerr.Error](err); ok && !ke.Retriable {
		return chassis.Refused
	}
	return chassis.Unreached
}
