package idemnats

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/internal/chassis"
)

// The headers a dead letter carries besides those of package consumer:
// where the message came from, so that it can be found and published
// again.
const (
	HeaderStream    = "idem-dead-letter-stream"    // the stream the message was stored in
	HeaderSubject   = "idem-dead-letter-subject"   // the subject it was published to
	HeaderSequence  = "idem-dead-letter-sequence"  // its stream sequence
	HeaderDelivered = "idem-dead-letter-delivered" // how many times JetStream had delivered it
	HeaderMsgID     = "idem-dead-letter-msg-id"    // its Nats-Msg-Id, if it had one
)

// deadLetterTimeout bounds the publish of one dead letter.
const deadLetterTimeout = 5 * time.Second

// defaultMaxPayload is the server's default max_payload, the limit of a
// dead letter when the connection does not know the server's yet.
const defaultMaxPayload = 1 << 20

// maxHeaders is the largest header block a JetStream stream stores (the
// server refuses a larger one: "header size exceeds maximum allowed of
// 64k", error code 10097), whatever its max_payload.
const maxHeaders = 1<<16 - 1

// errCodeHeaderTooLarge is JetStream's error code of a message whose
// headers are larger than maxHeaders (nats.go names no constant for it).
const errCodeHeaderTooLarge jetstream.ErrorCode = 10097

// poison settles a message that must never run again: its dead letter
// published and the message terminated, or, under WithDiscardPoison or
// once the broker refused the dead letter MaxAttempts times, the message
// terminated without one. A dead letter that cannot reach the server is
// tried again without end, the message held meanwhile (InProgress keeps
// JetStream from redelivering it); when the Run stops, it is handed back.
func (r *run) poison(d *delivery, v chassis.Verdict) {
	o := &r.c.o
	ctx := context.Background()
	attrs := append(d.attrs(), slog.String("reason", string(v.Reason)), slog.Any("cause", v.Cause))
	if !o.DeadLetters() {
		o.Logger().LogAttrs(ctx, slog.LevelWarn, "idemnats: poison discarded (WithDiscardPoison): terminated", attrs...)
		r.c.tries.Forget(d.id())
		r.settled(d, v, EventDiscarded, 0, d.msg.Term())
		return
	}
	l := r.letter(d, v)
	gaveUp, err := o.SendLetter(ctx, l, func() (chassis.Refusal, error) {
		err := r.publish(d, l)
		return refusalOf(err), err
	}, r.pause, attrs, slog.String("settlement", "terminated"), slog.String("dead_letter_subject", o.dlqSubject))
	switch {
	case err == nil:
		o.Logger().LogAttrs(ctx, slog.LevelWarn, "idemnats: poison dead-lettered",
			append(attrs, slog.String("dead_letter_subject", o.dlqSubject))...)
		r.c.tries.Forget(d.id())
		r.settled(d, v, EventDeadLettered, 0, d.msg.Term())
	case gaveUp:
		r.c.tries.Forget(d.id())
		r.settled(d, v, EventDiscarded, 0, d.msg.Term(), err)
	default:
		delay := r.handBack()
		r.settled(d, v, EventRequeued, delay, nak(d.msg, delay), err)
	}
}

// pause waits for d; false, at once, when the Run stops.
func (r *run) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stopping.Done():
		return false
	}
}

// letter returns the dead letter of d, fit to the max_payload of the
// dead-letter connection and its headers to what a stream stores: the
// original's data and headers but its Nats-* ones, the headers of package
// consumer, and where it came from.
func (r *run) letter(d *delivery, v chassis.Verdict) *chassis.Letter {
	h := d.msg.Headers()
	names := make([]string, 0, len(h))
	for name := range h {
		if !strings.HasPrefix(name, "Nats-") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var hs []chassis.Header
	for _, name := range names {
		for _, value := range h[name] {
			hs = append(hs, chassis.Header{Name: name, Value: []byte(value)})
		}
	}
	var extra []chassis.Header
	add := func(name, value string) { extra = append(extra, chassis.Header{Name: name, Value: []byte(value)}) }
	if id := h.Get(jetstream.MsgIDHeader); id != "" {
		add(HeaderMsgID, id)
	}
	add(HeaderSubject, d.msg.Subject())
	if md, err := d.msg.Metadata(); err == nil {
		add(HeaderStream, md.Stream)
		add(HeaderSequence, strconv.FormatUint(md.Sequence.Stream, 10))
		add(HeaderDelivered, strconv.FormatUint(md.NumDelivered, 10))
	}
	l := chassis.NewLetter(nil, d.msg.Data(), hs, v, d.key, d.keyOK, extra...)
	l.MaxHeaders = maxHeaders
	l.Fit(r.c.maxPayload())
	return l
}

// maxPayload returns the max_payload of the dead-letter connection's
// server: the largest message, headers included, it takes.
func (c *Consumer) maxPayload() int {
	if nc := c.o.dlqJS.Conn(); nc != nil {
		if n := nc.MaxPayload(); n > 0 {
			return int(n)
		}
	}
	return defaultMaxPayload
}

// publish publishes the dead letter l of d and waits for the stream's ack.
// Its Nats-Msg-Id is made of the original's stream and sequence: a
// redelivery of the same message publishes the same id, and the
// dead-letter stream's duplicate window drops the copy.
func (r *run) publish(d *delivery, l *chassis.Letter) error {
	o := &r.c.o
	m := &nats.Msg{Subject: o.dlqSubject, Data: l.Body, Header: nats.Header{}}
	for _, h := range l.Headers {
		m.Header.Add(h.Name, string(h.Value))
	}
	for _, h := range l.Added {
		m.Header.Set(h.Name, string(h.Value))
	}
	var opts []jetstream.PublishOpt
	if md, err := d.msg.Metadata(); err == nil {
		opts = append(opts, jetstream.WithMsgID("idem-dead-letter:"+md.Stream+":"+strconv.FormatUint(md.Sequence.Stream, 10)))
	}
	ctx, cancel := context.WithTimeout(r.work, deadLetterTimeout)
	defer cancel()
	_, err := o.dlqJS.PublishMsg(ctx, m, opts...)
	return err
}

// refusalOf classifies the error of a dead letter's publish: too large
// (the connection's max_payload, the stream's max_msg_size, JetStream's 64
// KiB of headers); refused (no stream takes the subject, the stream or
// account refused it); else no answer (the connection down or closed, a
// timeout).
func refusalOf(err error) chassis.Refusal {
	if apiErr, ok := errors.AsType[*jetstream.APIError](err); ok {
		if apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum || apiErr.ErrorCode == errCodeHeaderTooLarge {
			return chassis.RefusedTooLarge
		}
		return chassis.Refused
	}
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return chassis.RefusedTooLarge
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrHeadersNotSupported),
		errors.Is(err, nats.ErrPermissionViolation):
		return chassis.Refused
	}
	return chassis.Unreached
}
