package kafkapub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
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
// records of a partition refused so in one call, the largest: the others
// shared its batch, and fail with outbox.ErrHeldBack, which charges them
// no attempt), kerr.TopicAuthorizationFailed
// and kerr.InvalidTopicException. The errors that say the brokers could not
// be reached or could not take any record now come as an
// [outbox.UnavailableError], which counts no attempt of the message (the
// relay backs off and tries again, however long the outage): records that
// timed out or ran out of the client's retries (kgo.ErrRecordTimeout,
// kgo.ErrRecordRetries) unless a broker refused them (their last error
// UNKNOWN_TOPIC_OR_PARTITION, say), dial, connection and I/O errors, a
// closed client, no answer before ctx ended, and the broker errors of a
// partition without a leader or replicas in sync (NOT_LEADER_FOR_PARTITION,
// LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, …). Any
// other failure is a refusal, retried until RelayConfig.MaxAttempts.
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
		return outbox.Unavailable(fmt.Errorf("kafkapub: the records of an earlier call are still in flight: %w", ctx.Err()))
	}
	type result struct {
		i, partition int
		err          error
	}
	results := make(chan result, len(msgs)) // the promises never block
	left := atomic.Int64{}
	left.Store(int64(len(msgs)))
	for i, m := range msgs {
		p.client.Produce(ctx, p.record(m), func(r *kgo.Record, err error) {
			results <- result{i, int(r.Partition), err}
			if left.Add(-1) == 0 {
				<-p.turn // the next call may produce
			}
		})
	}
	errs := make([]error, len(msgs))
	partitions := make([]int, len(msgs))
	for range msgs {
		select {
		case res := <-results:
			partitions[res.i] = res.partition
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
			markUnavailable(errs)
			return outbox.NewPublishError(errs)
		}
	}
	markPermanent(msgs, partitions, errs)
	markUnavailable(errs)
	return outbox.NewPublishError(errs)
}

// markUnavailable wraps with outbox.Unavailable the errors that say the
// brokers could not be reached or could not take any record now, so that
// the relay counts no attempt of the message for them: see [unavailable].
func markUnavailable(errs []error) {
	for i, err := range errs {
		if err != nil && !outbox.IsPermanent(err) && unavailable(err) {
			errs[i] = outbox.Unavailable(err)
		}
	}
}

// unavailableCodes are the broker errors of a cluster that cannot take a
// partition's records now, whatever the records: no leader, a leader that
// moved or is not known yet, too few in-sync replicas, a request that
// timed out inside the cluster, a broken disk.
var unavailableCodes = []*kerr.Error{
	kerr.NotLeaderForPartition, kerr.LeaderNotAvailable, kerr.RequestTimedOut,
	kerr.BrokerNotAvailable, kerr.ReplicaNotAvailable, kerr.NetworkException,
	kerr.NotEnoughReplicas, kerr.NotEnoughReplicasAfterAppend, kerr.KafkaStorageError,
	kerr.FencedLeaderEpoch, kerr.UnknownLeaderEpoch, kerr.NotController,
	kerr.EligibleLeadersNotAvailable, kerr.PreferredLeaderNotAvailable,
}

// unavailable reports whether a record's failure says the brokers could
// not be reached or could not take it now, rather than anything of the
// record. A broker error (kerr.Error, alone or as the last error of a
// timeout) decides: one of unavailableCodes is, any other
// (UNKNOWN_TOPIC_OR_PARTITION, CORRUPT_MESSAGE, …) is a refusal. Without
// one: records that timed out or ran out of retries (kgo.ErrRecordTimeout,
// kgo.ErrRecordRetries: brokers unreachable), a closed client, a context's
// end, and dial, connection and I/O errors.
func unavailable(err error) bool {
	if ke, ok := errors.AsType[*kerr.Error](err); ok {
		return slices.Contains(unavailableCodes, ke)
	}
	for _, target := range []error{
		kgo.ErrRecordTimeout, kgo.ErrRecordRetries, kgo.ErrClientClosed,
		context.DeadlineExceeded, context.Canceled,
		io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	_, ok := errors.AsType[*os.SyscallError](err)
	return ok
}

// markPermanent wraps with outbox.Permanent the errors of msgs that
// publishing again cannot mend: a topic the client may not write or whose
// name is invalid, and a record too large. The broker refuses a whole
// batch, one partition's records, for the size of one of them: of the
// records of a partition that failed as too large, only the largest is
// permanent; the others failed for it, not for themselves
// (outbox.ErrHeldBack: the relay charges them nothing), and are published
// again, failing again on their own if they are too large too.
func markPermanent(msgs []outbox.Message, partitions []int, errs []error) {
	type place struct {
		topic     string
		partition int
	}
	largest := map[place]int{}
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.InvalidTopicException):
			errs[i] = outbox.Permanent(err)
		case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
			at := place{msgs[i].Destination, partitions[i]}
			if j, ok := largest[at]; !ok || size(msgs[i]) > size(msgs[j]) {
				largest[at] = i
			}
		}
	}
	for i, err := range errs {
		if !errors.Is(err, kerr.MessageTooLarge) && !errors.Is(err, kerr.RecordListTooLarge) {
			continue
		}
		if largest[place{msgs[i].Destination, partitions[i]}] == i {
			errs[i] = outbox.Permanent(err)
		} else {
			errs[i] = fmt.Errorf("%w: %w", outbox.ErrHeldBack, err)
		}
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
