package idemnats

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// KeyFunc returns the idempotency key of a message: "" and a nil error
// when it has none, an error when the key it carries cannot be used. It
// must not keep msg.
type KeyFunc func(msg jetstream.Msg) (string, error)

// ErrNoKey is the cause of a message dead-lettered because it carries no
// idempotency key (see [WithUnkeyed]).
var ErrNoKey = errors.New("idemnats: the message has no idempotency key")

// KeyError is the cause of a message dead-lettered because the key it
// carries cannot be used.
type KeyError struct {
	Source string // where the key was looked for: `header "Nats-Msg-Id"`, "key function"
	Err    error
}

func (e *KeyError) Error() string { return "idemnats: " + e.Source + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *KeyError) Unwrap() error { return e.Err }

// HeaderKey returns a [KeyFunc] that reads the key from the header name
// (case-sensitive, as NATS headers are). A missing header means no key; an
// empty one, or one sent more than once, is an unusable key.
func HeaderKey(name string) KeyFunc {
	source := fmt.Sprintf("header %q", name)
	return func(msg jetstream.Msg) (string, error) {
		switch vs := msg.Headers()[name]; {
		case len(vs) == 0:
			return "", nil
		case len(vs) > 1:
			return "", &KeyError{Source: source, Err: fmt.Errorf("sent %d times; send it once", len(vs))}
		case vs[0] == "":
			return "", &KeyError{Source: source, Err: errors.New("empty")}
		default:
			return vs[0], nil
		}
	}
}

// key returns the message's idempotency key: "" when it has none, a
// *KeyError when it is not usable.
func (c *Consumer) key(msg jetstream.Msg) (string, error) {
	k, err := c.o.key(msg)
	if err != nil {
		if _, ok := errors.AsType[*KeyError](err); !ok {
			err = &KeyError{Source: "key function", Err: err}
		}
		return "", err
	}
	return k, nil
}
