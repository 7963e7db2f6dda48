package idemnats

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/internal/chassis"
)

// handBackDelay is how long after the server has let go of this Run's
// pull requests a message the stopping Run hands back is redelivered.
//
// Not at once: the server redelivers a naked message to a pull request
// waiting for messages, and the Run's own cancelled Fetches stay on the
// server until they expire (nats.go has no way to withdraw one). Servers
// from 2.10 on skip a request whose client no longer listens; 2.9 servers
// send the message to it, where it is lost until AckWait passes (and count
// its deliveries wrongly). So the hand-back waits until the Run's last
// pull request has expired, and a little more: at most the fetch wait.
const handBackDelay = 100 * time.Millisecond

// handBack returns the Nak delay of a message the stopping Run hands back.
func (r *run) handBack() time.Duration {
	return max(time.Until(time.Unix(0, r.lastExpiry.Load())), 0) + handBackDelay
}

// settle carries out the verdict on a delivery: ack, nak (with a delay),
// or, for poison, dead-letter and terminate (see poison). A handler's
// failure is counted first.
func (r *run) settle(d *delivery, v chassis.Verdict) {
	c := r.c
	if v.Failed {
		c.tries.Failed(d.id())
	}
	switch v.Settle {
	case chassis.Ack:
		if c.tries.Len() > 0 {
			c.tries.Forget(d.id())
		}
		r.settled(d, v, EventAcked, 0, d.msg.Ack())
	case chassis.DeadLetter:
		r.poison(d, v)
	default:
		delay := v.Delay
		if r.stopping.Err() != nil {
			delay = r.handBack() // this consumer is going away
		} else if !v.Busy {
			c.o.Logger().LogAttrs(context.Background(), slog.LevelWarn, "idemnats: message will be redelivered",
				append(d.attrs(), slog.Duration("delay", delay), slog.Any("cause", v.Cause))...)
		}
		kind := EventRequeued
		if v.Busy {
			kind = EventDelayed
		}
		r.settled(d, v, kind, delay, nak(d.msg, delay))
	}
}

// settled records that d was settled as kind (after delay, for a Nak),
// logs the broker call that settled it if it failed (berr), and reports
// the event, with the broker's last refusal of its dead letter, if any.
func (r *run) settled(d *delivery, v chassis.Verdict, kind EventKind, delay time.Duration, berr error, refusal ...error) {
	c := r.c
	d.settled.Store(true)
	if berr != nil && !errors.Is(berr, jetstream.ErrMsgAlreadyAckd) {
		c.o.Logger().LogAttrs(context.Background(), slog.LevelWarn, "idemnats: settling the message failed; JetStream will redeliver it",
			append(d.attrs(), slog.String("event", kind.String()), slog.Any("error", berr))...)
	}
	if c.o.observer != nil {
		e := eventOf(d, kind, errors.Join(append(refusal, berr)...))
		e.Scope, e.Key, e.Reason, e.Err = d.scope, d.key, v.Reason, v.Cause
		switch kind {
		case EventAcked:
			e.Replayed = v.Replayed
		case EventDelayed, EventRequeued:
			e.Delay = delay
		}
		c.observe(context.Background(), e)
	}
}

// observe reports e to the observer, whose panic is recovered.
func (c *Consumer) observe(ctx context.Context, e Event) {
	c.o.Observe(ctx, func() { c.o.observer(ctx, e) })
}

func nak(msg jetstream.Msg, delay time.Duration) error {
	if delay > 0 {
		return msg.NakWithDelay(delay)
	}
	return msg.Nak()
}

// eventOf returns the event of kind k about d.
func eventOf(d *delivery, k EventKind, berr error) Event {
	e := Event{Kind: k, Subject: d.msg.Subject(), Duration: time.Since(d.received), BrokerErr: berr}
	if md, err := d.msg.Metadata(); err == nil {
		e.Stream, e.Sequence, e.Delivered = md.Stream, md.Sequence.Stream, md.NumDelivered
		e.Consumer, e.Pending = md.Consumer, md.NumPending
	}
	return e
}
