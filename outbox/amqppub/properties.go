package amqppub

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrPropertiesTooLarge is wrapped by the error of a message whose
// properties cannot be sent: a Content-Type header longer than the 255
// bytes of the content-type property, or headers that do not fit in one
// frame of the connection (its frame_max, 128 KiB on RabbitMQ by default),
// as AMQP requires. It comes as an outbox.PermanentError: the message is
// refused before it is sent, alone, where sending it would close the
// connection, and fail every message behind it, at every try.
var ErrPropertiesTooLarge = errors.New("amqppub: message properties too large")

// frameOverhead is the bytes of a frame around its payload: type, channel,
// size, and the frame-end octet.
const frameOverhead = 8

// checkProperties returns an error wrapping [ErrPropertiesTooLarge] when
// pub cannot be sent on a connection whose frames hold at most frameMax
// bytes (0: no limit).
func checkProperties(pub amqp.Publishing, frameMax int) error {
	if len(pub.ContentType) > 255 {
		return fmt.Errorf("%w: a Content-Type header of %d bytes, longer than the 255 of the content-type property",
			ErrPropertiesTooLarge, len(pub.ContentType))
	}
	if size := headerFrameSize(pub); frameMax > 0 && size > frameMax {
		return fmt.Errorf("%w: its properties (headers) take a frame of %d bytes, larger than the connection's frame_max of %d",
			ErrPropertiesTooLarge, size, frameMax)
	}
	return nil
}

// headerFrameSize returns the bytes of the content header frame of pub,
// as amqppub fills it: class, weight, body size and property flags, then
// the properties set.
func headerFrameSize(pub amqp.Publishing) int {
	n := frameOverhead + 2 + 2 + 8 + 2
	if pub.ContentType != "" {
		n += 1 + len(pub.ContentType)
	}
	if len(pub.Headers) > 0 {
		n += 4
		for name, v := range pub.Headers {
			s, _ := v.(string) // amqppub sets only strings
			n += 1 + len(name) + 1 + 4 + len(s)
		}
	}
	if pub.DeliveryMode > 0 {
		n++
	}
	if pub.MessageId != "" {
		n += 1 + len(pub.MessageId)
	}
	if !pub.Timestamp.IsZero() {
		n += 8
	}
	return n
}
