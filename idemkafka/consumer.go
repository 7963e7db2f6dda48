package idemkafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka/internal/consume"
	"github.com/idemgo/idem/internal/chassis"
)

// Handler handles one record. It runs at most once to completion per
// idempotency key (within its scope) while the Guard retains the key's
// outcome: nil stores the record's key as done; an error marked with
// idem.Permanent stores it as failed and the record is poison
// (dead-lettered, or discarded); any other error, or a panic
// (a *consumer.PanicError, logged), releases the key and the record is
// tried again after a backoff, up to [WithMaxAttempts] times. ctx carries
// the key's lease token (idem.TokenFrom), the values of the record's own
// context (kgo.Record.Context, where a kgo hook such as kotel put its span)
// and the record's W3C trace headers (consumer.TraceFrom); it is cancelled
// when the lease is lost, the partition is revoked, or the consumer's
// drain deadline passes, never by the record's context.
type Handler func(ctx context.Context, r *kgo.Record) error

// Consumer consumes records with a kgo.Client in a consumer group and runs
// a [Handler] for each under a Guard. Create one with [New], create the
// client with its [Consumer.ClientOpts], then [Consumer.Run].
type Consumer struct {
	c *consume.Consumer
	g *idem.Guard
	h Handler
}

// New returns a consumer that runs h for each record under g. It fails
// when g or h is nil, when no scope decision was made ([WithScope] or
// [WithSharedScope]), when no poison decision was made ([WithDeadLetter]
// or [WithDiscardPoison]), or when an option is out of range; the error
// names each.
func New(g *idem.Guard, h Handler, opts ...Option) (*Consumer, error) {
	switch {
	case g == nil:
		return nil, errors.New("idemkafka: New: Guard is nil")
	case h == nil:
		return nil, errors.New("idemkafka: New: Handler is nil")
	}
	c := &Consumer{g: g, h: h}
	var err error
	if c.c, err = consume.New("idemkafka", g, idem.Config{}, opts, processor{c}, nil); err != nil {
		return nil, err
	}
	return c, nil
}

// ClientOpts returns the options to create the consuming kgo.Client with,
// after the caller's own (kgo.SeedBrokers, kgo.ConsumerGroup,
// kgo.ConsumeTopics, …): the consumer's rebalance callbacks,
// kgo.BlockRebalanceOnPoll and kgo.DisableAutoCommit. Run refuses a
// client created without them.
func (c *Consumer) ClientOpts() []kgo.Opt { return c.c.ClientOpts() }

// Run consumes with cl until ctx ends, then shuts down gracefully: it
// stops fetching, lets the handlers in flight finish within the drain
// timeout (then cancels them), commits the finished offsets and leaves the
// group; the caller closes cl after. Partitions are handled concurrently,
// each strictly in offset order, one batch of fetched records at a time:
// the batch's keys are claimed in one round trip and their outcomes
// stored in one, where the Guard's store has batch calls. An offset is
// committed only once its record and every one before it in the partition
// is done: stored, a duplicate, dead-lettered or discarded.
//
// Run returns nil after a graceful shutdown, and an error when cl was not
// created with [Consumer.ClientOpts] in a consumer group with topics
// (before consuming anything), when cl is closed under it, or when the
// final commit fails.
func (c *Consumer) Run(ctx context.Context, cl *kgo.Client) error { return c.c.Run(ctx, cl) }

// processor is the consume.Processor of idemkafka.
type processor struct{ *Consumer }

// Process runs each run of keyed records through one DoBatch; a record
// without a usable key is poison, or runs unguarded, in its place.
func (c processor) Process(ctx context.Context, p *consume.Partition, items []consume.Item) (int, chassis.Verdict) {
	done := 0
	for i := 0; i < len(items); {
		j := i
		for j < len(items) && items[j].KeyOK {
			j++
		}
		if j == i { // no usable key
			it := items[i]
			var v chassis.Verdict
			switch {
			case !it.Unguarded:
				v = p.Unkeyed(it)
			case p.Draining():
				return done, chassis.Outage(consume.ErrDraining)
			default:
				v = p.Decide(ctx, it, idem.Result{}, c.run(ctx, p, it))
			}
			if stop, ok := p.Settle(ctx, it, v); !ok {
				return done, stop
			}
			done++
			i++
			continue
		}
		seg := items[i:j]
		ops := make([]idem.BatchOp, len(seg))
		for k, it := range seg {
			ops[k] = idem.BatchOp{Scope: it.Scope, Key: it.Key, Payload: it.Payload}
		}
		res := c.g.DoBatch(ctx, ops, func(ctx context.Context, k int) ([]byte, error) {
			if p.Draining() {
				return nil, consume.ErrDraining
			}
			return nil, c.run(ctx, p, seg[k])
		})
		for k, r := range res {
			if stop, ok := p.Settle(ctx, seg[k], p.Decide(ctx, seg[k], r.Result, r.Err)); !ok {
				return done, stop
			}
			done++
		}
		i = j
	}
	return done, chassis.Verdict{}
}

// run runs the handler for the record of it.
func (c *Consumer) run(ctx context.Context, p *consume.Partition, it consume.Item) error {
	return p.Run(ctx, it, func(ctx context.Context) error { return c.h(ctx, it.Rec) })
}
