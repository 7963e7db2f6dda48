package idemamqp

import (
	"cmp"
	"slices"
	"sync"
)

// tagLog is what a session knows of the deliveries it took and has not
// settled, in delivery-tag order, so that the outcome writer can ack a run
// of them with one basic.ack: an ack with multiple set settles every
// delivery of the channel up to its tag, so the writer sends one only for
// a run in which each delivery is either one it acks or one whose
// settlement was sent already. The broker then has one frame to handle for
// the run, and the consumer one write.
type tagLog struct {
	mu sync.Mutex // held by the writer while it acks: no settlement of the run's deliveries can come between
	es []tagEntry // the oldest not known settled first
}

type tagEntry struct {
	tag     uint64
	settled bool // its settlement was sent
	mine    bool // the writer acks it now
}

// add records a delivery taken: tags come in increasing order.
func (l *tagLog) add(tag uint64) {
	l.mu.Lock()
	l.es = append(l.es, tagEntry{tag: tag})
	l.mu.Unlock()
}

// settled records that the settlement of tag was sent (or that it never
// will be: the channel closed).
func (l *tagLog) settled(tag uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.find(tag); ok {
		l.es[i].settled = true
		l.trim()
	}
}

func (l *tagLog) find(tag uint64) (int, bool) {
	return slices.BinarySearchFunc(l.es, tag, func(e tagEntry, t uint64) int { return cmp.Compare(e.tag, t) })
}

// trim forgets the settled deliveries at the front.
func (l *tagLog) trim() {
	n := 0
	for n < len(l.es) && l.es[n].settled {
		n++
	}
	l.es = l.es[n:]
}

// ackAll acks the deliveries tags of s, and sets errs[i] to the error of
// tags[i]'s ack: the run of them at the front of s's log with one ack
// (multiple), the others one by one. Every one is settled in the log
// after.
func (s *session) ackAll(tags []uint64, errs []error) {
	l := &s.tags
	l.mu.Lock()
	defer l.mu.Unlock()
	upTo := l.run(tags)
	var runErr error
	if upTo != 0 {
		runErr = s.ch.Ack(upTo, true)
	}
	for i, t := range tags {
		if t <= upTo {
			errs[i] = runErr
		} else {
			errs[i] = s.ch.Ack(t, false)
		}
	}
	l.sent(tags)
}

// run marks tags as the writer's to ack and returns the last tag of the
// run at the front of the log that one ack with multiple set may settle:
// every delivery up to it is one of tags or settled already. 0: none.
// The caller holds mu.
func (l *tagLog) run(tags []uint64) (upTo uint64) {
	for _, t := range tags {
		if i, ok := l.find(t); ok {
			l.es[i].mine = true
		}
	}
	for _, e := range l.es {
		if !e.settled && !e.mine {
			break
		}
		if e.mine {
			upTo = e.tag
		}
	}
	return upTo
}

// sent records the acks of tags sent. The caller holds mu.
func (l *tagLog) sent(tags []uint64) {
	for _, t := range tags {
		if i, ok := l.find(t); ok {
			l.es[i].settled, l.es[i].mine = true, false
		}
	}
	l.trim()
}
