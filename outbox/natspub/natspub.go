package natspub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/outbox"
)

// Publisher publishes outbox messages to JetStream. It is safe for
// concurrent use; create it with [New].
type Publisher struct {
	js jetstream.JetStream
	nc *nats.Conn
}

var _ outbox.Publisher = (*Publisher)(nil)

// ErrReconnected is the error of the messages a call gave up because the
// connection was lost and reconnected while it ran.
var ErrReconnected = errors.New("natspub: the connection reconnected during the call")

// ErrNotConnected is the error of a call made while the connection is
// down; the relay backs off and tries again.
var ErrNotConnected = errors.New("natspub: not connected")

// New returns a Publisher over js. It fails when js is nil, or when its
// connection buffers publishes while reconnecting (create it with
// nats.ReconnectBufSize(-1), or without reconnects).
func New(js jetstream.JetStream) (*Publisher, error) {
	if js == nil {
		return nil, errors.New("natspub: New: JetStream is nil")
	}
	nc := js.Conn()
	if nc == nil {
		return nil, errors.New("natspub: New: the JetStream has no connection")
	}
	if nc.Opts.AllowReconnect && nc.Opts.ReconnectBufSize >= 0 {
		return nil, fmt.Errorf("natspub: New: the connection buffers up to %d bytes of publishes while it reconnects, "+
			"which could put a message ahead of an earlier one lost with the old connection: connect with nats.ReconnectBufSize(-1)",
			nc.Opts.ReconnectBufSize)
	}
	return &Publisher{js: js, nc: nc}, nil
}

// Publish publishes msgs and waits for the stream's acknowledgements; see
// outbox.Publisher and the package documentation for the order kept.
// A message is accepted once JetStream acknowledged it, a duplicate
// dropped by the stream's window included. It fails, for the relay to
// retry: every message while the connection is down ([ErrNotConnected]);
// the rest of the call once it reconnected ([ErrReconnected]); a message
// JetStream refused or did not acknowledge before ctx ended, with that
// error.
//
// The failures that say the server could not be reached come as an
// [outbox.UnavailableError], which counts no attempt of the message (the
// relay backs off and tries again, however long the outage): the
// connection down or lost (ErrNotConnected, ErrReconnected,
// nats.ErrDisconnected, a closed, reconnecting or draining connection),
// no ack in time (nats.ErrTimeout, jetstream.ErrAsyncPublishTimeout, ctx),
// a JetStream that answers 503, and no responders for a subject whose
// stream exists (jetstream.ErrNoStreamResponse from a restarting server,
// whose streams are not loaded yet; the Publisher asks JetStream which
// stream takes the subject, and the failure is unavailable unless the
// answer is none). A subject no stream takes is a refusal: retried until
// RelayConfig.MaxAttempts. A message that cannot be published as it is
// fails with an [outbox.PermanentError], which the relay does not retry
// (it moves the row to the dead rows): one larger than the server's
// max_payload (nats.ErrMaxPayload) or than its stream's max_msg_size
// (jetstream.ErrStreamMessageExceedsMaximum), or to an invalid subject
// ([ErrInvalidSubject], see [CheckSubject]). Such a message fails alone:
// the other messages of the call are published, but for the later ones
// of its key, held back (outbox.ErrHeldBack).
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !p.nc.IsConnected() {
		return outbox.Unavailable(fmt.Errorf("%w (%s)", ErrNotConnected, p.nc.Status()))
	}
	reconnects := p.nc.Stats().Reconnects
	return outbox.PublishInRounds(ctx, msgs, func(ctx context.Context, round []outbox.Message) []error {
		return p.send(ctx, round, reconnects)
	})
}

// send publishes round asynchronously and waits for every ack. Each
// message gets its own outcome: one the server cannot take fails alone,
// and the next is sent; only a connection lost or stalled fails the rest
// of the round, as unavailable, which charges them nothing.
func (p *Publisher) send(ctx context.Context, round []outbox.Message, reconnects uint64) []error {
	errs := make([]error, len(round))
	futures := make([]jetstream.PubAckFuture, len(round))
	for i, m := range round {
		if p.nc.Stats().Reconnects != reconnects || !p.nc.IsConnected() {
			fill(errs[i:], outbox.Unavailable(ErrReconnected))
			break
		}
		f, err := p.publishAsync(m)
		if err != nil && !outbox.IsPermanent(err) && (unavailable(err) || !p.nc.IsConnected()) {
			fill(errs[i:], outbox.Unavailable(err))
			break
		}
		futures[i], errs[i] = f, err
	}
	p.await(ctx, round, futures, errs)
	return errs
}

// fill sets every entry of errs to err.
func fill(errs []error, err error) {
	for i := range errs {
		errs[i] = err
	}
}

// publishAsync sends m without waiting for its ack. A message the client
// refuses before sending it (an invalid subject, one over max_payload)
// fails as permanent.
func (p *Publisher) publishAsync(m outbox.Message) (jetstream.PubAckFuture, error) {
	if err := CheckSubject(m.Destination); err != nil {
		// The client would refuse a subject with whitespace; the server
		// might take one with a wildcard or an empty token, and store
		// a message no consumer of the subject meant can read.
		return nil, outbox.Permanent(fmt.Errorf("natspub: publish: %w", err))
	}
	msg := &nats.Msg{Subject: m.Destination, Data: m.Payload}
	if len(m.Headers) > 0 {
		msg.Header = make(nats.Header, len(m.Headers)+1)
		for name, v := range m.Headers {
			msg.Header[name] = []string{v}
		}
	}
	// No retry inside the client: it would send the message again
	// later, behind others. The relay retries, in order.
	f, err := p.js.PublishMsgAsync(msg, jetstream.WithMsgID(m.ID), jetstream.WithRetryAttempts(0))
	switch {
	case err == nil:
		return f, nil
	case permanent(err):
		return nil, outbox.Permanent(fmt.Errorf("natspub: publish to %q: %w", m.Destination, err))
	}
	return nil, fmt.Errorf("natspub: publish to %q: %w", m.Destination, err)
}

// await waits for the ack of each of futures, and sets the failure of each
// message of round that has none in errs.
func (p *Publisher) await(ctx context.Context, round []outbox.Message, futures []jetstream.PubAckFuture, errs []error) {
	var streams map[string]bool // whether a stream takes a subject, once asked
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			subject := round[i].Destination
			errs[i] = fmt.Errorf("natspub: publish to %q: %w", subject, err)
			switch {
			case permanent(err):
				errs[i] = outbox.Permanent(errs[i])
			case errors.Is(err, jetstream.ErrNoStreamResponse):
				if streams == nil {
					streams = map[string]bool{}
				}
				taken, asked := streams[subject]
				if !asked {
					taken = p.streamTakes(ctx, subject)
					streams[subject] = taken
				}
				if taken {
					errs[i] = outbox.Unavailable(fmt.Errorf("%w (its stream is not ready)", errs[i]))
				}
			case unavailable(err):
				errs[i] = outbox.Unavailable(errs[i])
			}
		case <-ctx.Done():
			errs[i] = fmt.Errorf("natspub: publish to %q: no ack: %w", round[i].Destination, ctx.Err())
		}
	}
}

// unavailable reports whether err says the server could not be reached or
// cannot take any message now, rather than anything of the message: the
// connection is closed, reconnecting, draining or was lost before the ack
// (nats.ErrDisconnected), a request timed out, or JetStream answered 503
// (not enabled, not ready, out of resources). No stream for the subject
// (jetstream.ErrNoStreamResponse) is decided by [Publisher.streamTakes].
func unavailable(err error) bool {
	for _, target := range []error{
		nats.ErrConnectionClosed, nats.ErrConnectionReconnecting, nats.ErrConnectionDraining,
		nats.ErrDisconnected, nats.ErrNoServers, nats.ErrStaleConnection, nats.ErrTimeout,
		jetstream.ErrAsyncPublishTimeout, jetstream.ErrTooManyStalledMsgs,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	if apiErr, ok := errors.AsType[*jetstream.APIError](err); ok {
		return apiErr.Code == 503
	}
	return false
}

// streamTakes reports whether the subject belongs to a stream, after
// JetStream answered a publish to it with no responders: true when the
// stream exists (it is not ready: a restarting server answers so until its
// streams are loaded) or the question cannot be answered (the server is
// not reachable); false only when JetStream says no stream takes the
// subject, a refusal the relay charges to the message.
func (p *Publisher) streamTakes(ctx context.Context, subject string) bool {
	// A server still loading its streams may not answer at all: the
	// question must not hold the call until ctx ends.
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	_, err := p.js.StreamNameBySubject(ctx, subject)
	return !errors.Is(err, jetstream.ErrStreamNotFound)
}

// lookupTimeout bounds the question of [Publisher.streamTakes].
const lookupTimeout = 2 * time.Second

// permanent reports whether the client or JetStream refused a message for
// itself, so that publishing it again would fail again: it is larger than
// the server or its stream allows, or its subject is invalid. No stream for a subject (jetstream.ErrNoStreamResponse) is not
// permanent: a server that restarts answers so until its streams are
// ready.
func permanent(err error) bool {
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) ||
		errors.Is(err, nats.ErrBadSubject)
}
