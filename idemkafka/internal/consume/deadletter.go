package consume

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/internal/adapter"
)

// The headers of a dead letter, added to the original record's. The cause
// and reason headers have the names the other idem consumers use.
const (
	HeaderCause     = "idem-dead-letter-cause"     // the error that made the record a dead letter, at most 1 KiB
	HeaderReason    = "idem-dead-letter-reason"    // why, in a word: see the Reason constants
	HeaderTopic     = "idem-dead-letter-topic"     // the record's topic
	HeaderPartition = "idem-dead-letter-partition" // its partition, in decimal
	HeaderOffset    = "idem-dead-letter-offset"    // its offset, in decimal
	HeaderKey       = "idem-dead-letter-key"       // its idempotency key, when it had one
)

// maxCauseLen caps the cause header: an error's message can be long, a
// header should not be.
const maxCauseLen = 1024

// DeadLetter produces the item's record to the dead-letter topic, with the
// original key, value and headers, and headers saying why (the policy's
// action a) and whence. It returns once the broker acknowledged it.
func (p *Partition) DeadLetter(ctx context.Context, it Item, a adapter.Action) error {
	cause := a.Cause
	c, r := p.c, it.Rec
	dl := &kgo.Record{
		Topic:   c.o.DeadLetterTopic(r),
		Key:     r.Key,
		Value:   r.Value,
		Headers: slices.Clip(slices.Clone(r.Headers)),
	}
	dl.Headers = append(dl.Headers,
		kgo.RecordHeader{Key: HeaderCause, Value: causeHeader(cause)},
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(reason(a))},
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

// causeHeader is err's message, cut at a rune boundary to maxCauseLen.
func causeHeader(err error) []byte {
	b := []byte(err.Error())
	if len(b) <= maxCauseLen {
		return b
	}
	cut := maxCauseLen
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return b[:cut]
}
