package idemnats

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
)

// Event is one action the consumer took on a delivery, reported to the
// function of [WithObserver].
type Event struct {
	Action    Action
	Stream    string // the stream the message is stored in
	Sequence  uint64 // its stream sequence
	Delivered uint64 // how many times JetStream delivered it, this time included
	Subject   string
	Scope     string        // unset for ActionInProgress
	Key       string        // the idempotency key; unset for ActionInProgress
	Replayed  bool          // ActionAck: a duplicate of a stored outcome; the handler did not run
	Delay     time.Duration // ActionRetry: when JetStream redelivers it
	// Reason is set for ActionDeadLetter, and for the ActionRetry of poison
	// whose dead letter could not be published (BrokerErr says why).
	Reason Reason
	Err    error // ActionRetry and ActionDeadLetter: the cause
	// BrokerErr is the error of the broker call that carried the action
	// (Ack, Nak, Term, InProgress), or of the dead letter's publish. A
	// message whose ack was lost is redelivered, and acked as a duplicate.
	BrokerErr error
}

// The headers a dead letter carries besides the original's own (see
// [WithDeadLetter]).
const (
	HeaderReason           = "Idem-Reason"            // a [Reason]
	HeaderCause            = "Idem-Cause"             // the error's message, on one line, at most 1 KiB
	HeaderOriginalSubject  = "Idem-Original-Subject"  // the subject it was published to
	HeaderOriginalStream   = "Idem-Original-Stream"   // the stream it was stored in
	HeaderOriginalSequence = "Idem-Original-Sequence" // its stream sequence
	HeaderOriginalMsgID    = "Idem-Original-Msg-Id"   // its Nats-Msg-Id, if any
	HeaderDelivered        = "Idem-Delivered"         // how many times JetStream had delivered it
)

const maxCauseLen = 1024

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

// settle carries out the verdict on a delivery: ack, nak (with a delay) or
// dead-letter and terminate. A dead letter that cannot be published turns
// into a retry, so poison is never terminated without its dead letter.
func (r *run) settle(d *delivery, scope, key string, v verdict) {
	c := r.c
	if v.action == ActionRetry && r.stopping.Err() != nil {
		v.delay = r.handBack() // this consumer is going away
	}
	var berr error
	switch v.action {
	case ActionAck:
		berr = d.msg.Ack()
	case ActionDeadLetter:
		if perr := r.deadLetter(d, v); perr != nil {
			c.o.logger.Error("idemnats: dead letter not published; the message will be redelivered",
				slog.String("subject", d.msg.Subject()), slog.String("key", key), slog.String("reason", string(v.reason)),
				slog.Any("cause", v.cause), slog.Any("error", perr))
			v.action, v.delay = ActionRetry, c.o.retryDelay
			if r.stopping.Err() != nil {
				v.delay = r.handBack()
			}
			berr = errors.Join(perr, nak(d.msg, v.delay))
			break
		}
		berr = d.msg.Term()
		c.o.logger.Warn("idemnats: message dead-lettered",
			slog.String("subject", d.msg.Subject()), slog.String("key", key), slog.String("reason", string(v.reason)),
			slog.Any("cause", v.cause), slog.Bool("published", c.o.dlqJS != nil))
	case ActionRetry:
		berr = nak(d.msg, v.delay)
		if v.reason == "" && !errors.Is(v.cause, errStopping) && !isBusy(v) {
			c.o.logger.Warn("idemnats: message will be redelivered",
				slog.String("subject", d.msg.Subject()), slog.String("key", key), slog.Duration("delay", v.delay), slog.Any("cause", v.cause))
		}
	}
	d.settled.Store(true)
	if berr != nil && !errors.Is(berr, jetstream.ErrMsgAlreadyAckd) {
		c.o.logger.Warn("idemnats: settling the message failed; JetStream will redeliver it",
			slog.String("subject", d.msg.Subject()), slog.String("key", key), slog.String("action", v.action.String()), slog.Any("error", berr))
	}
	c.observeSettled(d, scope, key, v, berr)
}

func isBusy(v verdict) bool { return errors.Is(v.cause, idem.ErrInProgress) }

func nak(msg jetstream.Msg, delay time.Duration) error {
	if delay > 0 {
		return msg.NakWithDelay(delay)
	}
	return msg.Nak()
}

func (c *Consumer) observeSettled(d *delivery, scope, key string, v verdict, berr error) {
	if c.o.observer != nil {
		c.o.observer(context.Background(), eventOf(d, v.action, scope, key, v, berr))
	}
}

func eventOf(d *delivery, a Action, scope, key string, v verdict, berr error) Event {
	e := Event{Action: a, Subject: d.msg.Subject(), Scope: scope, Key: key, Reason: v.reason, Err: v.cause, BrokerErr: berr}
	switch a {
	case ActionAck:
		e.Replayed = d.replayed
	case ActionRetry:
		e.Delay = v.delay
	}
	if md, err := d.msg.Metadata(); err == nil {
		e.Stream, e.Sequence, e.Delivered = md.Stream, md.Sequence.Stream, md.NumDelivered
	}
	return e
}

// deadLetter publishes the poison message to the dead-letter subject, if
// one is configured, and waits for the stream's ack.
func (r *run) deadLetter(d *delivery, v verdict) error {
	c := r.c
	if c.o.dlqJS == nil {
		return nil
	}
	dl := &nats.Msg{Subject: c.o.dlqSubject, Data: d.msg.Data(), Header: make(nats.Header)}
	for k, vs := range d.msg.Headers() {
		if !strings.HasPrefix(k, "Nats-") {
			dl.Header[k] = vs
		}
	}
	if id := d.msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		dl.Header.Set(HeaderOriginalMsgID, id)
	}
	dl.Header.Set(HeaderReason, string(v.reason))
	dl.Header.Set(HeaderCause, oneLine(v.cause))
	dl.Header.Set(HeaderOriginalSubject, d.msg.Subject())
	var opts []jetstream.PublishOpt
	if md, err := d.msg.Metadata(); err == nil {
		seq := strconv.FormatUint(md.Sequence.Stream, 10)
		dl.Header.Set(HeaderOriginalStream, md.Stream)
		dl.Header.Set(HeaderOriginalSequence, seq)
		dl.Header.Set(HeaderDelivered, strconv.FormatUint(md.NumDelivered, 10))
		// A redelivery of the same message publishes the same id: the
		// dead-letter stream's duplicate window drops the copy.
		opts = append(opts, jetstream.WithMsgID("idem-dead-letter:"+md.Stream+":"+seq))
	}
	ctx, cancel := context.WithTimeout(r.work, DefaultDeadLetterTimeout)
	defer cancel()
	_, err := c.o.dlqJS.PublishMsg(ctx, dl, opts...)
	return err
}

// oneLine returns err's message fit for a header value: on one line, at
// most maxCauseLen bytes, valid UTF-8.
func oneLine(err error) string {
	if err == nil {
		return ""
	}
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r < ' ' && r != '\t' {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxCauseLen {
		cut := maxCauseLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
