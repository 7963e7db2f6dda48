package idemkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka/internal/consume"
	"github.com/idemgo/idem/internal/adapter"
)

// Handler handles one record. It runs at most once to completion per
// idempotency key (within its scope) while the Guard retains the key's
// outcome: nil stores the record's key as done, an error marked with
// idem.Permanent stores it as failed and dead-letters the record, any
// other error releases the key and the record is tried again after a
// backoff. ctx carries the key's lease token (idem.TokenFrom) and is
// cancelled when the lease is lost, the partition is revoked, or the
// consumer's drain deadline passes.
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
// [WithSharedScope]), or when an option is out of range; the error names
// it.
func New(g *idem.Guard, h Handler, opts ...Option) (*Consumer, error) {
	o := consume.Options{Prefix: "idemkafka"}
	if g == nil {
		o.Failf("New: the Guard is nil")
	}
	if h == nil {
		o.Failf("New: the Handler is nil")
	}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	c := &Consumer{g: g, h: h}
	c.c = consume.New(o, processor{c}, nil)
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
// is done: stored, a duplicate, or dead-lettered.
//
// Run returns nil after a graceful shutdown, and an error when cl was not
// created with [Consumer.ClientOpts] in a consumer group with topics
// (before consuming anything), when cl is closed under it, or when the
// final commit fails.
func (c *Consumer) Run(ctx context.Context, cl *kgo.Client) error { return c.c.Run(ctx, cl) }

var errDraining = errors.New("idemkafka: not started: the consumer is shutting down")

// processor is the consume.Processor of idemkafka.
type processor struct{ *Consumer }

// Process runs each run of keyed records through one DoBatch; a record
// without a usable key is dead-lettered, or run unguarded, in its place.
func (c processor) Process(ctx context.Context, p *consume.Partition, items []consume.Item) (int, error) {
	o := c.c.Options()
	done := 0
	for i := 0; i < len(items); {
		j := i
		for j < len(items) && items[j].KeyErr == nil {
			j++
		}
		if j == i { // no usable key
			it := items[i]
			a, guarded := consume.DecideKey(it.KeyErr, o.Unkeyed)
			if !guarded {
				if p.Draining() {
					return done, errDraining
				}
				a = consume.Decide(idem.Result{}, c.handle(ctx, it.Rec))
			}
			if err := settle(ctx, p, it, a); err != nil {
				return done, err
			}
			done++
			i++
			continue
		}
		seg := items[i:j]
		ops := make([]idem.BatchOp, len(seg))
		for k, it := range seg {
			ops[k] = idem.BatchOp{Scope: it.Scope, Key: it.Key, Payload: o.Payload(it.Rec)}
		}
		res := c.g.DoBatch(ctx, ops, func(ctx context.Context, k int) ([]byte, error) {
			if p.Draining() {
				return nil, errDraining
			}
			return nil, c.handle(ctx, seg[k].Rec)
		})
		for k, r := range res {
			if err := settle(ctx, p, seg[k], consume.Decide(r.Result, r.Err)); err != nil {
				return done, err
			}
			done++
		}
		i = j
	}
	return done, nil
}

// handle runs the handler, turning a panic into an error that releases
// the key: a handler that panics on a record is retried, and stopped by
// the Guard's MaxAttempts, rather than crashing the process.
func (c *Consumer) handle(ctx context.Context, r *kgo.Record) (err error) {
	defer func() {
		if v := recover(); v != nil {
			c.c.Options().Logger.ErrorContext(ctx, "idemkafka: handler panicked", slog.String("topic", r.Topic),
				slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
			err = fmt.Errorf("idemkafka: handler panicked: %v", v)
		}
	}()
	return c.h(ctx, r)
}

// settle carries out the policy's action a for a handled item: nil when
// it is done (acknowledged, or dead-lettered), else the error that stops
// the batch before it.
func settle(ctx context.Context, p *consume.Partition, it consume.Item, a adapter.Action) error {
	switch a.Verdict {
	case adapter.Ack:
		if a.Replayed {
			p.Replayed(1)
		}
		return nil
	case adapter.DeadLetter:
		return p.DeadLetter(ctx, it, a)
	}
	return a.Cause
}
