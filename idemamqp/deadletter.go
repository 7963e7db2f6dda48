package idemamqp

import (
	"errors"
	"log/slog"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/internal/chassis"
)

// The headers a dead letter carries besides those of package consumer:
// where the message came from, so that it can be found and published
// again.
const (
	HeaderQueue      = "idem-dead-letter-queue"       // the queue it was consumed from
	HeaderExchange   = "idem-dead-letter-exchange"    // the exchange it was published to ("" for the default exchange)
	HeaderRoutingKey = "idem-dead-letter-routing-key" // the routing key it was published with
)

// poison settles a delivery that must never run again: its dead letter
// published and the delivery acked, or, under WithDiscardPoison or once
// the broker refused the dead letter MaxAttempts times, the delivery
// rejected without requeue.
func (r *runner) poison(dl delivery, v chassis.Verdict) {
	o := &r.c.o
	attrs := []slog.Attr{slog.String("queue", r.c.queue), slog.String("scope", dl.ev.Scope), slog.String("key", dl.key),
		slog.String("reason", string(v.Reason)), slog.Any("cause", v.Cause), slog.Uint64("delivery_tag", dl.d.DeliveryTag)}
	if !o.DeadLetters() {
		o.Logger().LogAttrs(r.hctx, slog.LevelWarn, "idemamqp: poison discarded (WithDiscardPoison): rejected without requeue, "+
			"to the queue's own dead-letter exchange if it has one", attrs...)
		r.c.tries.Forget(dl.id)
		r.settled(dl, EventDiscarded, dl.s.ch.Reject(dl.d.DeliveryTag, false))
		return
	}
	to := o.deadLetter
	l := r.letter(dl, v)
	if frame := dl.s.frameSize; frame > 0 && headerFrameSize(letterPublishing(dl.d, l)) > frame {
		// Fit counts generously; this is the exact count, should the
		// original's typed headers have fooled it.
		l.Strip()
	}
	gaveUp, err := o.SendLetter(r.hctx, l, func() (chassis.Refusal, error) {
		err := r.c.scrub(dl.s.publish(r.hctx, to.exchange, to.routingKey, letterPublishing(dl.d, l)))
		refusal, refused := errors.AsType[*refusedError](err)
		switch {
		case refused && refusal.strip:
			return chassis.RefusedTooLarge, err
		case refused:
			return chassis.Refused, err
		}
		return chassis.Unreached, err
	}, func(d time.Duration) bool { return r.wait(dl.s, d) }, attrs,
		slog.String("settlement", "rejected without requeue, to the queue's own dead-letter exchange if it has one"),
		slog.String("exchange", to.exchange),
		slog.String("routing_key", to.routingKey), slog.String("exchange_from", dl.d.Exchange),
		slog.String("routing_key_from", dl.d.RoutingKey), slog.String("message_id", dl.d.MessageId))
	switch {
	case err == nil:
		o.Logger().LogAttrs(r.hctx, slog.LevelWarn, "idemamqp: poison dead-lettered",
			append(attrs, slog.String("exchange", to.exchange), slog.String("routing_key", to.routingKey))...)
		r.c.tries.Forget(dl.id)
		r.settled(dl, EventDeadLettered, dl.s.ch.Ack(dl.d.DeliveryTag, false))
	case gaveUp:
		dl.ev.BrokerErr = err
		r.c.tries.Forget(dl.id)
		r.settled(dl, EventDiscarded, dl.s.ch.Reject(dl.d.DeliveryTag, false))
	default:
		r.requeue(dl, 0) // the consumer stops, or the connection is gone: the broker has it again
	}
}

// letter returns the dead letter of dl, fit to the broker's limits: its
// headers to the connection's frame, the whole to the max message size.
func (r *runner) letter(dl delivery, v chassis.Verdict) *chassis.Letter {
	d := dl.d
	names := make([]string, 0, len(d.Headers))
	for name := range d.Headers {
		names = append(names, name)
	}
	slices.Sort(names)
	hs := make([]chassis.Header, 0, len(names))
	for _, name := range names {
		// The letter's value stands for the header's size alone: the
		// publishing takes the typed value from d (see letterPublishing).
		value, ok := headerText(d, name)
		if !ok {
			value = string(make([]byte, fieldSize(d.Headers[name])))
		}
		hs = append(hs, chassis.Header{Name: name, Value: []byte(value)})
	}
	l := chassis.NewLetter(nil, d.Body, hs, v, dl.key, dl.keyOK,
		chassis.Header{Name: HeaderQueue, Value: []byte(r.c.queue)},
		chassis.Header{Name: HeaderExchange, Value: []byte(d.Exchange)},
		chassis.Header{Name: HeaderRoutingKey, Value: []byte(d.RoutingKey)})
	if frame := dl.s.frameSize; frame > 0 {
		l.MaxHeaders = max(1, frame-headerFrameSize(publishing(d, nil, nil)))
	}
	l.Fit(r.c.o.maxMessage)
	return l
}

// letterPublishing returns the publishing of the dead letter l of d: d's
// properties, the headers l kept with their typed values, l's own headers
// and body.
func letterPublishing(d amqp.Delivery, l *chassis.Letter) amqp.Publishing {
	headers := make(amqp.Table, len(l.Headers)+len(l.Added))
	for _, h := range l.Headers {
		headers[h.Name] = d.Headers[h.Name]
	}
	for _, h := range l.Added {
		headers[h.Name] = string(h.Value)
	}
	return publishing(d, headers, l.Body)
}

// headerFrameSize returns the size of p's content header frame on the
// wire, which must fit the connection's frame size: the frame's header and
// end (8 bytes), the class, weight, body size and property flags (14), and
// the properties.
func headerFrameSize(p amqp.Publishing) int {
	n := 8 + 14
	for _, s := range []string{p.ContentType, p.ContentEncoding, p.CorrelationId, p.ReplyTo, p.Expiration,
		p.MessageId, p.Type, p.UserId, p.AppId} {
		if s != "" {
			n += 1 + len(s)
		}
	}
	if len(p.Headers) > 0 {
		n += tableSize(p.Headers)
	}
	if p.DeliveryMode > 0 {
		n++
	}
	if p.Priority > 0 {
		n++
	}
	if !p.Timestamp.IsZero() {
		n += 8
	}
	return n
}

// tableSize returns the size of a field table on the wire, as amqp091
// writes it.
func tableSize(t amqp.Table) int {
	n := 4
	for k, v := range t {
		n += 1 + len(k) + fieldSize(v)
	}
	return n
}

// fieldSize returns the size of a field value on the wire, its type byte
// with it, as amqp091 writes it; for a type it does not write, a size
// larger than any it could be written in.
func fieldSize(v any) int {
	switch v := v.(type) {
	case nil:
		return 1
	case bool, byte, int8:
		return 2
	case int16, uint16:
		return 3
	case int, int32, uint32, float32:
		return 5
	case amqp.Decimal:
		return 6
	case int64, float64, time.Time:
		return 9
	case string:
		return 5 + len(v)
	case []byte:
		return 5 + len(v)
	case amqp.Table:
		return 1 + tableSize(v)
	case []any:
		n := 5
		for _, x := range v {
			n += fieldSize(x)
		}
		return n
	}
	return 1 << 20
}
