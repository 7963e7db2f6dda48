package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/outbox"
)

// DefaultIDHeader is the record header that carries the message ID.
const DefaultIDHeader = "idempotency-key"

// Publisher produces outbox messages to Kafka. It is safe for concurrent
// use; create it with [New].
type Publisher struct {
	client   *kgo.Client
	idHeader string
	// turn is held from a call's first Produce until its last record is
	// answered, which may be after the call returned.
	turn chan struct{}
}

var _ outbox.Publisher = (*Publisher)(nil)

// Option configures a [Publisher].
type Option func(*Publisher) error

// WithIDHeader sets the record header that carries the message ID.
// Default [DefaultIDHeader].
func WithIDHeader(name string) Option {
	return func(p *Publisher) error {
		if name == "" {
			return errors.New("kafkapub: WithIDHeader(\"\"): the name must not be empty")
		}
		p.idHeader = name
		return nil
	}
}

// New returns a Publisher that produces with client. It fails when client
// is nil, does not produce idempotently (kgo.DisableIdempotentWrite: its
// retries could reorder and duplicate records), or is transactional (it
// would need a transaction around every call), or when an option fails.
// The client stays the caller's to close.
func New(client *kgo.Client, opts ...Option) (*Publisher, error) {
	if client == nil {
		return nil, errors.New("kafkapub: New: client is nil")
	}
	if disabled, _ := client.OptValue(kgo.DisableIdempotentWrite).(bool); disabled {
		return nil, errors.New("kafkapub: New: the client does not produce idempotently (kgo.DisableIdempotentWrite)")
	}
	if vs := client.OptValues(kgo.TransactionalID); len(vs) == 2 && vs[1] == true {
		return nil, errors.New("kafkapub: New: the client is transactional (kgo.TransactionalID)")
	}
	p := &Publisher{client: client, idHeader: DefaultIDHeader, turn: make(chan struct{}, 1)}
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("kafkapub: New: nil Option")
		}
		if err := opt(p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Publish produces msgs and waits until each is written or failed, or
// ctx ends; see outbox.Publisher. A failed message carries the client's
// error (a kerr.Error from the broker, kgo.ErrRecordTimeout, ctx's error).
// The errors that publishing again cannot mend come as an
// [outbox.PermanentError], which the relay does not retry (it moves the
// row to the dead rows): kerr.MessageTooLarge (a record larger than the
// client's ProducerBatchMaxBytes or the broker's message.max.bytes; of the
// records of one call refused so, the largest), kerr.TopicAuthorizationFailed
// and kerr.InvalidTopicException.
//
// When ctx ends first, the records already sent stay with the client,
// which retries them until they are written (the idempotent producer
// cannot know whether the broker has them): the call returns, reporting
// them failed, and the next call waits for them before it produces
// anything, so that a key's records never overtake one another and a
// broker outage does not pile up copies in the client.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("kafkapub: the records of an earlier call are still in flight: %w", ctx.Err())
	}
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(msgs)) // the promises never block
	left := atomic.Int64{}
	left.Store(int64(len(msgs)))
	for i, m := range msgs {
		p.client.Produce(ctx, p.record(m), func(r *kgo.Record, err error) {
			results <- result{i, err}
			if left.Add(-1) == 0 {
				<-p.turn // the next call may produce
			}
		})
	}
	errs := make([]error, len(msgs))
	for range msgs {
		select {
		case res := <-results:
			if res.err != nil {
				errs[res.i] = fmt.Errorf("kafkapub: produce to %q: %w", msgs[res.i].Destination, res.err)
			}
		case <-ctx.Done():
			for i := range errs {
				if errs[i] == nil {
					errs[i] = fmt.Errorf("kafkapub: produce to %q: no answer: %w", msgs[i].Destination, ctx.Err())
				}
			}
			// Those answered in the meantime (written or not) are still
			// reported as failed: the relay publishes them again.
			return outbox.NewPublishError(errs)
		}
	}
	markPermanent(msgs, errs)
	return outbox.NewPublishError(errs)
}

// markPermanent wraps with outbox.Permanent the errors of msgs that
// publishing again cannot mend: a topic the client may not write or whose
// name is invalid, and a record too large. The broker refuses a whole
// batch for the size of one of its records, so of the records of a call
// that failed as too large only the largest is permanent; the others are
// published again, and fail again if they are too large too.
func markPermanent(msgs []outbox.Message, errs []error) {
	largest := -1
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.InvalidTopicException):
			errs[i] = outbox.Permanent(err)
		case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
			if largest < 0 || size(msgs[i]) > size(msgs[largest]) {
				largest = i
			}
		}
	}
	if largest >= 0 {
		errs[largest] = outbox.Permanent(errs[largest])
	}
}

// size is about the bytes of m's record.
func size(m outbox.Message) int {
	n := len(m.Key) + len(m.Payload) + len(m.ID)
	for name, v := range m.Headers {
		n += len(name) + len(v)
	}
	return n
}

// record is m as a Kafka record.
func (p *Publisher) record(m outbox.Message) *kgo.Record {
	// No Timestamp: franz-go would count RecordDeliveryTimeout from it,
	// and the message may have waited in the outbox for longer.
	r := &kgo.Record{Topic: m.Destination, Value: m.Payload}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	r.Headers = make([]kgo.RecordHeader, 0, len(m.Headers)+1)
	for name, v := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: name, Value: []byte(v)})
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: p.idHeader, Value: []byte(m.ID)})
	return r
}
