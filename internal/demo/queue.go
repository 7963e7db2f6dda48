package demo

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// errDrained is what receive returns once every message was acked.
var errDrained = errors.New("idem: broker: every message was acked")

// broker is an in-process at-least-once queue, shaped like SQS or RabbitMQ
// with manual acks. Every message is delivered until a consumer acks it:
//   - a nacked delivery is delivered again after the delay the consumer asks;
//   - a delivery neither acked nor nacked within the visibility timeout (its
//     consumer crashed) is delivered again;
//   - an ack or nack of a delivery that timed out, or was settled, is
//     ignored: the message belongs to its next delivery.
//
// Duplicates are in the stream it is given (see newStream): the broker
// treats every copy as a message of its own.
type broker struct {
	visibility time.Duration

	mu      sync.Mutex
	msgs    []Message
	slots   []slot // one per message, by index
	ready   []int  // indexes of the messages waiting for a consumer, in order
	due     dueHeap
	unacked int
	wake    chan struct{} // closed (and replaced) to wake the consumers waiting in receive
	waiting int

	deliveries int // every delivery, redeliveries included
	duplicates int // duplicate copies delivered at least once
	timeouts   int // redeliveries after the visibility timeout
	acked      atomic.Int64
}

// slot is the broker's state of one message.
type slot struct {
	state    slotState
	gen      uint64 // bumped at every change: a delivery may settle its message only while gen is the one it got
	attempts int    // deliveries so far
}

type slotState uint8

const (
	slotReady    slotState = iota // waiting in ready
	slotInFlight                  // delivered, neither acked nor nacked yet
	slotDelayed                   // nacked, waiting for its delay
	slotAcked                     // done
)

// delivery is one delivery of a message to a consumer. Settle it with ack
// or nack, or drop it (a crash) and let the visibility timeout redeliver it.
type delivery struct {
	b       *broker
	id      int // the message's index
	gen     uint64
	attempt int // 1 at the first delivery of this copy
	msg     *Message
}

func newBroker(msgs []Message, visibility time.Duration) *broker {
	b := &broker{
		visibility: visibility,
		msgs:       msgs,
		slots:      make([]slot, len(msgs)),
		ready:      make([]int, len(msgs)),
		unacked:    len(msgs),
		wake:       make(chan struct{}),
	}
	for i := range b.ready {
		b.ready[i] = i
	}
	return b
}

// receive returns the next delivery, waiting for one when every unacked
// message is in flight or delayed. It returns errDrained once every message
// was acked, and ctx's error when ctx ends first.
func (b *broker) receive(ctx context.Context) (*delivery, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	b.mu.Lock()
	for {
		if err := ctx.Err(); err != nil {
			b.mu.Unlock()
			return nil, err
		}
		now := time.Now()
		b.releaseDueLocked(now)
		if len(b.ready) > 0 {
			d := b.deliverLocked(now)
			b.mu.Unlock()
			return d, nil
		}
		if b.unacked == 0 {
			b.mu.Unlock()
			return nil, errDrained
		}
		// Every unacked message is in flight or delayed, so it has a timer:
		// wait for the first, or for an ack, nack or delivery to change that.
		wait := time.Hour
		if len(b.due) > 0 {
			wait = b.due[0].at.Sub(now)
		}
		wake := b.wake
		b.waiting++
		b.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
		}
		b.mu.Lock()
		b.waiting--
	}
}

func (b *broker) deliverLocked(now time.Time) *delivery {
	id := b.ready[0]
	b.ready = b.ready[1:]
	s := &b.slots[id]
	s.state = slotInFlight
	s.gen++
	s.attempts++
	b.deliveries++
	if s.attempts == 1 && b.msgs[id].Duplicate {
		b.duplicates++
	}
	b.pushDueLocked(dueEntry{at: now.Add(b.visibility), id: id, gen: s.gen})
	return &delivery{b: b, id: id, gen: s.gen, attempt: s.attempts, msg: &b.msgs[id]}
}

// releaseDueLocked moves the messages whose visibility timeout or nack delay
// passed back to ready.
func (b *broker) releaseDueLocked(now time.Time) {
	for len(b.due) > 0 && !b.due[0].at.After(now) {
		t := heap.Pop(&b.due).(dueEntry)
		s := &b.slots[t.id]
		if t.gen != s.gen {
			continue // the message was settled or moved on since
		}
		if s.state == slotInFlight {
			b.timeouts++ // its consumer neither acked nor nacked in time
		}
		s.state = slotReady
		s.gen++ // the timed-out delivery can no longer ack
		b.ready = append(b.ready, t.id)
	}
}

func (b *broker) pushDueLocked(t dueEntry) {
	first := len(b.due) == 0 || t.at.Before(b.due[0].at)
	heap.Push(&b.due, t)
	if first {
		b.wakeLocked() // the waiters sleep until a later time
	}
}

func (b *broker) wakeLocked() {
	if b.waiting > 0 {
		close(b.wake)
		b.wake = make(chan struct{})
	}
}

// ack settles the delivery: its message is done. It reports false, and
// changes nothing, when the delivery timed out or was settled before.
func (d *delivery) ack() bool {
	return d.settle(func(b *broker, s *slot) {
		s.state = slotAcked
		b.unacked--
		b.acked.Add(1)
		if b.unacked == 0 {
			b.wakeLocked() // the waiters are done
		}
	})
}

// nack hands the message back for a new delivery after delay. It reports
// false, and changes nothing, when the delivery timed out or was settled.
func (d *delivery) nack(delay time.Duration) bool {
	return d.settle(func(b *broker, s *slot) {
		s.state = slotDelayed
		b.pushDueLocked(dueEntry{at: time.Now().Add(delay), id: d.id, gen: s.gen})
	})
}

// settle ends the delivery under the broker's lock: when it is still in
// flight, it moves its slot to the next generation and has f set what
// comes of the message, and reports true; else it reports false.
func (d *delivery) settle(f func(b *broker, s *slot)) bool {
	b := d.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := &b.slots[d.id]
	if s.state != slotInFlight || s.gen != d.gen {
		return false
	}
	s.gen++
	f(b, s)
	return true
}

// BrokerStats is what the broker counted during a run.
type BrokerStats struct {
	Deliveries int    // every delivery, redeliveries included
	Duplicates int    // duplicate copies delivered at least once
	Timeouts   int    // redeliveries after the visibility timeout
	Unacked    []bool // by order: a message of the order is not acked
}

func (b *broker) stats(orders int) BrokerStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := BrokerStats{Deliveries: b.deliveries, Duplicates: b.duplicates, Timeouts: b.timeouts, Unacked: make([]bool, orders)}
	for i, s := range b.slots {
		if s.state != slotAcked {
			st.Unacked[b.msgs[i].Order] = true
		}
	}
	return st
}

// dueEntry is when a message in flight times out, or a nacked one is due again.
type dueEntry struct {
	at  time.Time
	id  int
	gen uint64 // the slot's gen when set: a settled delivery leaves a stale entry behind
}

// dueHeap is a min-heap of dueEntries by time (container/heap).
type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
