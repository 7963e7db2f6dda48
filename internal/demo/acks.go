package demo

import "sync/atomic"

// Acks is what a run through a broker counts of its stream, message by
// message: the deliveries, the duplicate copies among them, and the acks.
type Acks struct {
	msgs       []Message
	acked      []atomic.Bool // by message index
	count      atomic.Int64
	deliveries atomic.Int64
	duplicates atomic.Int64
	all        chan struct{} // closed once every message is acked
}

// NewAcks returns the counts of a run of stream, nothing delivered yet.
func NewAcks(stream []Message) *Acks {
	return &Acks{msgs: stream, acked: make([]atomic.Bool, len(stream)), all: make(chan struct{})}
}

// Delivered counts a delivery of the message at index idx, attempt being
// its delivery's number (1 for the first).
func (a *Acks) Delivered(idx, attempt int) {
	a.deliveries.Add(1)
	if attempt == 1 && a.msgs[idx].Duplicate {
		a.duplicates.Add(1)
	}
}

// Ack records that the message at index idx was acked; the last message's
// first ack closes All.
func (a *Acks) Ack(idx int) {
	if !a.acked[idx].Swap(true) && int(a.count.Add(1)) == len(a.msgs) {
		close(a.all)
	}
}

// Count returns how many messages were acked.
func (a *Acks) Count() int64 { return a.count.Load() }

// All is closed once every message is acked.
func (a *Acks) All() <-chan struct{} { return a.all }

// Stats returns the counts as the table takes them, for a stream of
// orders orders.
func (a *Acks) Stats(orders int) BrokerStats {
	st := BrokerStats{Deliveries: int(a.deliveries.Load()), Duplicates: int(a.duplicates.Load()), Unacked: make([]bool, orders)}
	for i := range a.acked {
		if !a.acked[i].Load() {
			st.Unacked[a.msgs[i].Order] = true
		}
	}
	return st
}
