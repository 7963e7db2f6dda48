package idemamqp

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// KeyFunc returns the idempotency key of a delivery: "" and a nil error
// when it has none, an error when the key it carries cannot be used.
type KeyFunc func(d amqp.Delivery) (string, error)

// ErrNoKey is the cause of a delivery dead-lettered because it carries no
// idempotency key (see [WithUnkeyed]).
var ErrNoKey = errors.New("idemamqp: the delivery has no idempotency key")

// KeyError is the cause of a delivery dead-lettered because the key it
// carries cannot be used.
type KeyError struct {
	Source string // where the key was looked for: `header "idempotency-key"`, "key function"
	Err    error
}

func (e *KeyError) Error() string { return "idemamqp: " + e.Source + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *KeyError) Unwrap() error { return e.Err }

// keyOf returns the delivery's idempotency key: "" when it has none, a
// *KeyError when it is not usable.
func (o *options) keyOf(d amqp.Delivery) (string, error) {
	k, err := o.key(d)
	if err != nil {
		if _, ok := errors.AsType[*KeyError](err); !ok {
			err = &KeyError{Source: "key function", Err: err}
		}
		return "", err
	}
	return k, nil
}

// HeaderKey returns a [KeyFunc] that reads the key from the header name: a
// string, or bytes (a byte array in the table, which some clients send for
// strings). A missing header means no key; a header of any other type, or
// an empty one, is an unusable key.
func HeaderKey(name string) KeyFunc {
	source := fmt.Sprintf("header %q", name)
	return func(d amqp.Delivery) (string, error) {
		v, ok := d.Headers[name]
		if !ok {
			return "", nil
		}
		var key string
		switch v := v.(type) {
		case string:
			key = v
		case []byte:
			key = string(v)
		default:
			return "", &KeyError{Source: source, Err: fmt.Errorf("a %T, not a string", v)}
		}
		if key == "" {
			return "", &KeyError{Source: source, Err: errors.New("empty")}
		}
		return key, nil
	}
}

// MessageIDKey is a [KeyFunc] that takes the key from the message-id
// property; a delivery without one has no key.
func MessageIDKey(d amqp.Delivery) (string, error) { return d.MessageId, nil }
