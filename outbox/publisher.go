package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Publisher sends messages to a broker for a [Relay]. The publishers of
// this project live in modules of their own, so that a program downloads
// only its broker's client: natspub (NATS JetStream), kafkapub (Kafka,
// franz-go) and amqppub (RabbitMQ, amqp091-go).
//
// Publish sends msgs, in order, and returns once the broker has accepted
// each of them (a JetStream ack, a Kafka produce response, an AMQP
// publisher confirm) or the attempt failed. It returns nil when every
// message was accepted; a [*PublishError] when some were and some were not
// (built with [NewPublishError]); any other error when none is known to be
// accepted. The Relay marks the accepted messages sent and publishes the
// others again later, with the same IDs, so the broker may hold a message
// twice: the next hop deduplicates by ID.
//
// The Relay keeps the messages of a key in order only if its Publisher
// does, within one call: the broker must receive msgs in the order given,
// and when a message fails, no later message of its key may reach the
// broker ahead of it. Two things can break that: a connection lost in the
// middle of a call, after which later messages go out on a new connection
// while earlier ones were lost with the old one (give up the rest of the
// call instead); and a broker that refuses one message and accepts the
// next (send a key's messages one round at a time: [PublishInRounds]).
//
// Publish is called by one goroutine at a time per Relay; one Publisher
// may serve several Relays only if it is safe for concurrent use.
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) error
}

// PublishError reports which messages of a [Publisher.Publish] call failed.
type PublishError struct {
	// Errs has one entry per message of the call, in order: nil for a
	// message the broker accepted, else why it was not.
	Errs []error
}

// NewPublishError returns nil when every entry of errs is nil, else a
// *PublishError holding errs.
func NewPublishError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &PublishError{Errs: errs}
		}
	}
	return nil
}

func (e *PublishError) Error() string {
	failed, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	return fmt.Sprintf("outbox: %d of %d messages not published: %v", failed, len(e.Errs), first)
}

// Unwrap returns the distinct errors of the failed messages, so that
// errors.Is finds a cause.
func (e *PublishError) Unwrap() []error {
	var errs []error
	for _, err := range e.Errs {
		if err != nil && !slices.ContainsFunc(errs, func(e error) bool { return errors.Is(e, err) }) {
			errs = append(errs, err)
		}
	}
	return errs
}

// failures returns, for a Publish of n messages that returned err, which
// failed: all of them unless err is a *PublishError with n entries; and
// whether the call failed as a whole (err is not such a *PublishError).
func failures(n int, err error) (_ []error, whole bool) {
	errs := make([]error, n)
	if err == nil {
		return errs, false
	}
	if pe, ok := errors.AsType[*PublishError](err); ok && len(pe.Errs) == n {
		copy(errs, pe.Errs)
		return errs, false
	}
	for i := range errs {
		errs[i] = err
	}
	return errs, true
}
