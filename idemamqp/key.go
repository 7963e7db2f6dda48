package idemamqp

import (
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// MessageIDKey is a key function for [WithKeyFunc] that takes the key from
// the message-id property; a delivery without one has no key.
func MessageIDKey(d amqp.Delivery) (string, error) { return d.MessageId, nil }

// headerText returns the header name of d as text, and whether d has it
// as text: a string, or bytes (a byte array in the table, which some
// clients send for strings). Names are matched as AMQP does, with case.
func headerText(d amqp.Delivery, name string) (string, bool) {
	switch v := d.Headers[name].(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// headerValues returns the value of the header name of d, as the chassis
// reads a key header: none when d has no such header as text.
func headerValues(d amqp.Delivery, name string) []string {
	if v, ok := headerText(d, name); ok {
		return []string{v}
	}
	return nil
}

// checkHeader returns why the header name of d cannot hold a key: it is
// there, but not as text.
func checkHeader(d amqp.Delivery, name string) error {
	v, ok := d.Headers[name]
	if !ok {
		return nil
	}
	if _, text := headerText(d, name); !text {
		return fmt.Errorf("a %T, not a string", v)
	}
	return nil
}

// validHeaderName reports whether name can name a header: an AMQP short
// string, 1 to 255 bytes.
func validHeaderName(name string) bool { return name != "" && len(name) <= 255 }

// traceHeader returns the header name of d as text, matched without
// regard to case when no header has the name as it is.
func traceHeader(d amqp.Delivery, name string) string {
	if v, ok := headerText(d, name); ok {
		return v
	}
	for k := range d.Headers {
		if strings.EqualFold(k, name) {
			v, _ := headerText(d, k)
			return v
		}
	}
	return ""
}
