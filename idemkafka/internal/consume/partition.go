package consume

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/chassis"
)

// Partition is one assigned partition of a [Consumer]: a goroutine that
// handles its records in order through the Processor. Its fetches are
// paused while a batch of records waits in its queue, so a slow or stuck
// partition holds no more than that and the others go on.
type Partition struct {
	c         *Consumer
	client    *kgo.Client
	Topic     string
	Partition int32

	ctx      context.Context // cancelled when the partition is given up or the drain deadline passes
	cancel   context.CancelCauseFunc
	draining atomic.Bool
	wake     chan struct{} // a push, a drain or a stop
	done     chan struct{} // closed when the worker exits

	// The record being retried (worker only): its offset (-1: none), how
	// many times in a row it was not finished (for the backoff), and how
	// many of those its handler failed (toward MaxAttempts).
	retryAt  int64
	tries    int
	failures int
	replayed int // duplicates among the records finished since the last EventBatch (worker only)

	mu        sync.Mutex
	queue     []*kgo.Record
	paused    bool
	hw        int64           // high watermark at the last fetch
	next      kgo.EpochOffset // one past the last finished record
	finished  bool            // a record was finished: next means something
	committed int64           // the offset last committed (-1: none)
}

func newPartition(c *Consumer, cl *kgo.Client, topic string, partition int32) *Partition {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Partition{
		c: c, client: cl, Topic: topic, Partition: partition,
		ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		committed: -1, retryAt: -1,
	}
}

// Client returns the consuming client.
func (p *Partition) Client() *kgo.Client { return p.client }

// Draining reports that the consumer shuts down: the handler in flight may
// finish, no other may start.
func (p *Partition) Draining() bool { return p.draining.Load() }

func (p *Partition) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Partition) startDrain() {
	p.draining.Store(true)
	p.signal()
}

func (p *Partition) stop(cause error) {
	p.draining.Store(true)
	p.cancel(cause)
	p.signal()
}

func (p *Partition) tps() map[string][]int32 { return map[string][]int32{p.Topic: {p.Partition}} }

// push queues fetched records, and pauses the partition's fetches once a
// whole batch waits.
func (p *Partition) push(recs []*kgo.Record, hw int64) {
	p.mu.Lock()
	p.queue = append(p.queue, recs...)
	p.hw = hw
	if !p.paused && len(p.queue) >= p.c.o.MaxBatch {
		p.paused = true
		p.client.PauseFetchPartitions(p.tps())
	}
	p.mu.Unlock()
	p.signal()
}

// take returns the next batch of records, waiting for one; nil once the
// partition is draining or stopped. It resumes fetches once less than a
// batch waits.
func (p *Partition) take() []*kgo.Record {
	for {
		if p.draining.Load() {
			return nil
		}
		p.mu.Lock()
		if n := min(len(p.queue), p.c.o.MaxBatch); n > 0 {
			recs := p.queue[:n:n]
			p.queue = p.queue[n:]
			if len(p.queue) == 0 {
				p.queue = nil
			}
			if p.paused && len(p.queue) < p.c.o.MaxBatch {
				p.paused = false
				p.client.ResumeFetchPartitions(p.tps())
			}
			p.mu.Unlock()
			return recs
		}
		p.mu.Unlock()
		<-p.wake
	}
}

func (p *Partition) run() {
	defer p.c.workers.Done()
	defer close(p.done)
	defer p.cancel(context.Canceled)
	for {
		recs := p.take()
		if recs == nil || !p.handle(recs) {
			return
		}
	}
}

// handle gives recs to the Processor until all are done, retrying the
// first that is not with backoff. It returns false when the partition
// stopped or drains before they are.
func (p *Partition) handle(recs []*kgo.Record) bool {
	o := &p.c.o
	items := make([]Item, len(recs))
	for i, r := range recs {
		items[i] = o.item(r)
	}
	alone := false // after a retry, the record retried goes alone first
	for len(items) > 0 {
		if p.draining.Load() {
			return false
		}
		cur := items
		if alone {
			cur = items[:1]
		}
		start := time.Now()
		n, v := p.c.proc.Process(p.ctx, p, cur)
		n = max(0, min(n, len(cur)))
		if n > 0 {
			p.advance(items[n-1].Rec, n, time.Since(start))
			items = items[n:]
		}
		if n == len(cur) {
			alone = false
			continue
		}
		if p.draining.Load() {
			return false
		}
		alone = true
		r := items[0].Rec
		if p.retryAt != r.Offset {
			p.retryAt, p.tries, p.failures = r.Offset, 0, 0
		}
		p.tries++
		if v.Failed {
			p.failures++
		}
		delay, level := o.Backoff(p.tries), slog.LevelWarn
		if v.Busy {
			// A duplicate in flight elsewhere: wait for it.
			delay, level = v.Delay, slog.LevelDebug
		}
		it := items[0]
		o.Logger().LogAttrs(p.ctx, level, o.Names().Pkg+": record not finished; retrying", append(recordAttrs(r),
			slog.Duration("delay", delay), slog.Int("failures", p.failures), slog.Any("error", v.Cause))...)
		ev := Event{Kind: EventRetry, Topic: p.Topic, Partition: p.Partition, Offset: r.Offset, Delay: delay, Err: v.Cause}
		if it.KeyOK {
			ev.Key = it.Key
		}
		p.c.observe(p.ctx, ev)
		if !p.sleep(delay) {
			return false
		}
	}
	return true
}

// sleep waits d, and reports whether the partition may go on: false once
// it is stopped or draining.
func (p *Partition) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		if p.draining.Load() {
			return false
		}
		select {
		case <-t.C:
			return !p.draining.Load()
		case <-p.ctx.Done():
			return false
		case <-p.wake:
			// A push, or a drain: look again. (take finds pushed
			// records in the queue without the signal.)
		}
	}
}

// advance records that the partition is finished up to and including r,
// the last of n records just finished.
func (p *Partition) advance(r *kgo.Record, n int, took time.Duration) {
	next := kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
	p.mu.Lock()
	p.next, p.finished = next, true
	lag := max(p.hw-next.Offset, 0)
	p.mu.Unlock()
	if p.c.marks {
		p.client.MarkCommitOffsets(map[string]map[int32]kgo.EpochOffset{p.Topic: {p.Partition: next}})
	}
	p.retryAt, p.tries, p.failures = -1, 0, 0
	p.c.observe(p.ctx, Event{Kind: EventBatch, Topic: p.Topic, Partition: p.Partition, Offset: next.Offset, Lag: lag, Records: n, Replayed: p.replayed, Duration: took})
	p.replayed = 0
}

// Failures returns how many times in a row the handler of r failed: not
// counting a busy key, a store or database that could not be reached, a
// shutdown, or a dead letter that could not be produced.
func (p *Partition) Failures(r *kgo.Record) int {
	if p.retryAt == r.Offset {
		return p.failures
	}
	return 0
}

// Decide returns the verdict on the record of it, whose handler ran with
// ctx (or did not) and which the Guard (or the TxGuard) answered with res
// and err: the chassis's, with the record's failures so far. A handler
// that failed because the partition stops (its context ended: revoked,
// lost, the drain deadline) made no attempt: its record is retried by the
// next owner.
func (p *Partition) Decide(ctx context.Context, it Item, res idem.Result, err error) chassis.Verdict {
	v := p.c.o.Decide(res, err, p.Failures(it.Rec))
	if v.Failed && ctx.Err() != nil {
		return chassis.Outage(err)
	}
	return v
}

// Unkeyed returns the verdict on the record of it, which runs neither
// guarded nor unguarded: poison, for a key that is missing or cannot be
// used.
func (p *Partition) Unkeyed(it Item) chassis.Verdict { return p.c.o.DecideKey(it.keyErr) }

// Settle carries out the verdict v on the handled record of it, and
// reports whether the record is done: acknowledged (counted as replayed
// when it is), or dead-lettered or discarded (see poison). When it is not,
// stop is the verdict that stops the Processor before it: v, a Retry, or
// an outage when the dead letter could not be had before the partition
// stopped.
func (p *Partition) Settle(ctx context.Context, it Item, v chassis.Verdict) (stop chassis.Verdict, done bool) {
	switch v.Settle {
	case chassis.Ack:
		if v.Replayed {
			p.replayed++
		}
		return stop, true
	case chassis.DeadLetter:
		if err := p.poison(ctx, it, v); err != nil {
			return chassis.Outage(err), false
		}
		return stop, true
	}
	return v, false
}

// Replayed counts n records the Processor finished as duplicates without
// Settle (a whole batch committed at once), for the next EventBatch.
func (p *Partition) Replayed(n int) { p.replayed += n }

// uncommitted returns the offset to commit, if it is past the committed one.
func (p *Partition) uncommitted() (kgo.EpochOffset, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next, p.finished && p.next.Offset > p.committed
}

func (p *Partition) committedTo(offset int64) {
	p.mu.Lock()
	p.committed = max(p.committed, offset)
	p.mu.Unlock()
}
