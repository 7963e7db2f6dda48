package idemnats

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// progress keeps JetStream from redelivering the messages a Run holds.
//
// JetStream redelivers a message that is not acked within the consumer's
// AckWait, counted from its delivery. Every message of a fetched batch is
// delivered at once, but the batch's handlers run one after another, so a
// message may wait its turn longer than AckWait even when each handler is
// quick. InProgress restarts the AckWait clock, so progress sends it, every
// AckWait/3, for every message of the Run's batches that is not settled
// yet and whose clock last restarted at least AckWait/3 ago: a message
// handled within AckWait/3 costs nothing, and no message goes longer than
// 2·AckWait/3 without a restart.
//
// The Guard's heartbeat, which renews the store lease, cannot carry this:
// it beats at the Guard's Lease/3, which has nothing to do with AckWait,
// it exposes no per-call hook, and it covers the running handler only,
// not the messages waiting their turn. One ticker per Run covers them all
// and stops when the Run ends. A message whose handler ran past its lease
// loses the lease (its handler's context is cancelled) whatever InProgress
// says: InProgress keeps the broker from redelivering, the lease keeps the
// store from handing the key to someone else.
type progress struct {
	every   time.Duration
	observe func(context.Context, Event)
	logger  *slog.Logger

	mu      sync.Mutex
	batches map[*batch]struct{}
}

// batch is the deliveries of one Fetch.
type batch struct {
	mu sync.Mutex
	ds []*delivery
}

// delivery is one message of a batch.
type delivery struct {
	msg      jetstream.Msg
	received time.Time
	last     time.Time // guarded by batch.mu: when AckWait last restarted (delivery or InProgress)
	settled  atomic.Bool
	scope    string // its scope, once read
	key      string // its key, once read; "" for none
	keyOK    bool   // key is a usable key
	payload  []byte // what the Guard fingerprints, once read; until its claim
}

func (p *progress) init(every time.Duration, observe func(context.Context, Event), logger *slog.Logger) {
	p.every = max(every, time.Millisecond)
	p.observe = observe
	p.logger = logger
	p.batches = make(map[*batch]struct{})
}

func (p *progress) track() *batch {
	b := &batch{}
	p.mu.Lock()
	p.batches[b] = struct{}{}
	p.mu.Unlock()
	return b
}

func (p *progress) untrack(b *batch) {
	p.mu.Lock()
	delete(p.batches, b)
	p.mu.Unlock()
}

func (b *batch) add(msg jetstream.Msg) *delivery {
	d := &delivery{msg: msg, received: time.Now()}
	b.mu.Lock()
	d.last = d.received
	b.ds = append(b.ds, d)
	b.mu.Unlock()
	return d
}

// loop sends InProgress every p.every until ctx ends.
func (p *progress) loop(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	var due []*delivery
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due = p.due(due[:0], time.Now())
		for _, d := range due {
			if d.settled.Load() {
				continue
			}
			err := d.msg.InProgress()
			if err != nil {
				p.logger.Debug("idemnats: InProgress failed", slog.Any("error", err))
			}
			if p.observe != nil {
				p.observe(ctx, eventOf(d, EventInProgress, err))
			}
		}
		clear(due)
	}
}

// due appends to dst the deliveries not settled whose AckWait clock last
// restarted at least p.every before now, and restarts it.
func (p *progress) due(dst []*delivery, now time.Time) []*delivery {
	p.mu.Lock()
	defer p.mu.Unlock()
	for b := range p.batches {
		b.mu.Lock()
		for _, d := range b.ds {
			if !d.settled.Load() && now.Sub(d.last) >= p.every {
				d.last = now
				dst = append(dst, d)
			}
		}
		b.mu.Unlock()
	}
	return dst
}
