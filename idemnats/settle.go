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
	"github.com/idemgo/idem/internal/adapter"
)

// action is how a delivery is settled.
type action uint8

const (
	actAck        action = iota + 1 // the outcome is stored, or was already: Ack
	actRetry                        // deliver again after a delay: NakWithDelay
	actDeadLetter                   // never deliver again: dead-letter, Term
)

// verdict is what happens to a delivery.
type verdict struct {
	action action
	delay  time.Duration // actRetry
	busy   bool          // actRetry because another holder has the key
	reason Reason        // actDeadLetter
	cause  error
}

// verdictOf maps what the Guard answered for a delivery to its verdict, by
// the policy every idem consumer shares (internal/adapter), with this
// consumer's delays. An outcome that could not be stored is never acked:
// the message comes back, and its next delivery finds the stored outcome,
// or takes the key over once the lease ends.
func (o *options) verdictOf(res idem.Result, err error) verdict {
	a := adapter.Decide(res, err)
	v := verdict{cause: a.Cause}
	switch a.Verdict {
	case adapter.Ack:
		v.action = actAck
	case adapter.Retry:
		v.action, v.delay = actRetry, o.retryDelay
		if a.Class == adapter.InProgress {
			v.delay, v.busy = o.busyDelay, true
		}
	default:
		v.action, v.reason = actDeadLetter, reasonOf(a.Class)
	}
	return v
}

// reasonOf names the cause of a dead letter of class c.
func reasonOf(c adapter.Class) Reason {
	switch c {
	case adapter.TooManyAttempts:
		return ReasonTooManyAttempts
	case adapter.KeyReused:
		return ReasonKeyReused
	case adapter.InvalidKey:
		return ReasonInvalidKey
	}
	return ReasonPermanent
}

// The headers a dead letter carries besides the original's own (see
// [WithDeadLetter]). The cause header has the name the other idem
// consumers use.
const (
	CauseHeader     = "idem-dead-letter-cause"     // the error's message, on one line, at most 1 KiB
	ReasonHeader    = "idem-dead-letter-reason"    // a [Reason]
	StreamHeader    = "idem-dead-letter-stream"    // the stream the message was stored in
	SubjectHeader   = "idem-dead-letter-subject"   // the subject it was published to
	SequenceHeader  = "idem-dead-letter-sequence"  // its stream sequence
	DeliveredHeader = "idem-dead-letter-delivered" // how many times JetStream had delivered it
	MsgIDHeader     = "idem-dead-letter-msg-id"    // its Nats-Msg-Id, if it had one
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
	if v.action == actRetry && r.stopping.Err() != nil {
		v.delay = r.handBack() // this consumer is going away
	}
	var berr error
	switch v.action {
	case actAck:
		berr = d.msg.Ack()
	case actDeadLetter:
		if perr := r.deadLetter(d, v); perr != nil {
			c.o.Logger().Error("idemnats: dead letter not published; the message will be redelivered",
				slog.String("subject", d.msg.Subject()), slog.String("key", key), slog.String("reason", string(v.reason)),
				slog.Any("cause", v.cause), slog.Any("error", perr))
			v.action, v.delay = actRetry, c.o.retryDelay
			if r.stopping.Err() != nil {
				v.delay = r.handBack()
			}
			berr = errors.Join(perr, nak(d.msg, v.delay))
			break
		}
		berr = d.msg.Term()
		c.o.Logger().Warn("idemnats: message dead-lettered",
			slog.String("subject", d.msg.Subject()), slog.String("key", key), slog.String("reason", string(v.reason)),
			slog.Any("cause", v.cause), slog.Bool("published", c.o.dlqJS != nil))
	case actRetry:
		berr = nak(d.msg, v.delay)
		if v.reason == "" && !errors.Is(v.cause, errStopping) && !v.busy {
			c.o.Logger().Warn("idemnats: message will be redelivered",
				slog.String("subject", d.msg.Subject()), slog.String("key", key), slog.Duration("delay", v.delay), slog.Any("cause", v.cause))
		}
	}
	d.settled.Store(true)
	if berr != nil && !errors.Is(berr, jetstream.ErrMsgAlreadyAckd) {
		c.o.Logger().Warn("idemnats: settling the message failed; JetStream will redeliver it",
			slog.String("subject", d.msg.Subject()), slog.String("key", key), slog.String("event", v.kind().String()), slog.Any("error", berr))
	}
	c.observeSettled(d, scope, key, v, berr)
}

func nak(msg jetstream.Msg, delay time.Duration) error {
	if delay > 0 {
		return msg.NakWithDelay(delay)
	}
	return msg.Nak()
}

func (c *Consumer) observeSettled(d *delivery, scope, key string, v verdict, berr error) {
	if c.o.observer != nil {
		e := eventOf(d, v.kind(), berr)
		e.Scope, e.Key, e.Reason, e.Err = scope, key, v.reason, v.cause
		switch e.Kind {
		case EventAcked:
			e.Replayed = d.replayed
		case EventDelayed, EventRequeued:
			e.Delay = v.delay
		}
		c.o.observer(context.Background(), e)
	}
}

// eventOf returns the event of kind k about d.
func eventOf(d *delivery, k EventKind, berr error) Event {
	e := Event{Kind: k, Subject: d.msg.Subject(), Duration: time.Since(d.received), BrokerErr: berr}
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
		dl.Header.Set(MsgIDHeader, id)
	}
	dl.Header.Set(ReasonHeader, string(v.reason))
	dl.Header.Set(CauseHeader, oneLine(v.cause))
	dl.Header.Set(SubjectHeader, d.msg.Subject())
	var opts []jetstream.PublishOpt
	if md, err := d.msg.Metadata(); err == nil {
		seq := strconv.FormatUint(md.Sequence.Stream, 10)
		dl.Header.Set(StreamHeader, md.Stream)
		dl.Header.Set(SequenceHeader, seq)
		dl.Header.Set(DeliveredHeader, strconv.FormatUint(md.NumDelivered, 10))
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
