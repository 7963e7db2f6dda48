package consume

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The headers of a dead letter, added to the original record's.
const (
	HeaderCause     = "idem-dlq-cause"     // the error that made the record a dead letter
	HeaderTopic     = "idem-dlq-topic"     // the record's topic
	HeaderPartition = "idem-dlq-partition" // its partition, in decimal
	HeaderOffset    = "idem-dlq-offset"    // its offset, in decimal
	HeaderKey       = "idem-dlq-key"       // its idempotency key, when it had one
)

// DeadLetter produces the item's record to the dead-letter topic, with the
// original key, value and headers, and headers saying why and whence. It
// returns once the broker acknowledged it.
func (p *Partition) DeadLetter(ctx context.Context, it Item, cause error) error {
	c, r := p.c, it.Rec
	dl := &kgo.Record{
		Topic:   c.o.DeadLetterTopic(r),
		Key:     r.Key,
		Value:   r.Value,
		Headers: slices.Clip(slices.Clone(r.Headers)),
	}
	dl.Headers = append(dl.Headers,
		kgo.RecordHeader{Key: HeaderCause, Value: []byte(cause.Error())},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: HeaderOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
	)
	if it.KeyErr == nil {
		dl.Headers = append(dl.Headers, kgo.RecordHeader{Key: HeaderKey, Value: []byte(it.Key)})
	}
	producer := c.o.DeadLetterClient
	if producer == nil {
		producer = p.client
	}
	if err := producer.ProduceSync(ctx, dl).FirstErr(); err != nil {
		c.o.Logger.ErrorContext(ctx, c.o.Prefix+": cannot produce a dead letter; the record waits",
			slog.String("topic", r.Topic), slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset),
			slog.String("dead_letter_topic", dl.Topic), slog.Any("cause", cause), slog.Any("error", err))
		return fmt.Errorf("%s: dead letter to %s: %w", c.o.Prefix, dl.Topic, err)
	}
	c.o.Logger.WarnContext(ctx, c.o.Prefix+": record dead-lettered",
		slog.String("topic", r.Topic), slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset),
		slog.String("dead_letter_topic", dl.Topic), slog.Any("cause", cause))
	c.observe(ctx, Event{Kind: EventDeadLetter, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: cause})
	return nil
}
