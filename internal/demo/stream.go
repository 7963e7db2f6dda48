package demo

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Message is one OrderCreated event as the producer published it.
type Message struct {
	Order     int    // the order's index in the ledger
	Key       string // the order ID: the idempotency key
	Payload   []byte // the event's body
	Duplicate bool   // an extra copy of an earlier message
}

// dupWindow is how many positions after its original a duplicate may land:
// close enough that a copy is often in flight while the original is.
const dupWindow = 16

// NewStream returns what the producer publishes for orders orders, in the
// order the broker delivers it: one message per order and, with probability
// dupRate, an extra copy a few positions later, as a producer retry or a
// broker duplicate makes. The same seed gives the same stream.
func NewStream(seed uint64, orders int, dupRate float64) []Message {
	rng := rand.New(rand.NewPCG(seed, streamMessages))
	type placed struct {
		pos float64
		msg Message
	}
	out := make([]placed, 0, orders+orders/4)
	for i := range orders {
		m := Message{Order: i, Key: fmt.Sprintf("order-%06d", i)}
		m.Payload = fmt.Appendf(nil, `{"type":"OrderCreated","order":%q,"customer":"cus-%04d","amount_cents":%d}`,
			m.Key, rng.IntN(10000), 500+rng.IntN(50000))
		out = append(out, placed{float64(i), m})
		if rng.Float64() < dupRate {
			dup := m
			dup.Duplicate = true
			out = append(out, placed{float64(i) + 0.5 + rng.Float64()*dupWindow, dup})
		}
	}
	slices.SortStableFunc(out, func(a, b placed) int {
		switch {
		case a.pos < b.pos:
			return -1
		case a.pos > b.pos:
			return 1
		}
		return 0
	})
	msgs := make([]Message, len(out))
	for i, p := range out {
		msgs[i] = p.msg
	}
	return msgs
}

// The PCG streams of the demo's random choices, so that the messages and the
// crash points come from one seed without depending on each other.
const (
	streamMessages = 1 << 63
	streamCrashes  = 1 << 62
)
