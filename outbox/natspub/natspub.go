package natspub

import (
	"context"
	"errors"
	"fmt"

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
// error. A message that cannot be published as it is fails with an
// [outbox.PermanentError], which the relay does not retry (it moves the
// row to the dead rows): one larger than the server's max_payload
// (nats.ErrMaxPayload) or than its stream's max_msg_size
// (jetstream.ErrStreamMessageExceedsMaximum). A subject no stream takes
// (jetstream.ErrNoStreamResponse) is retried, as a server that restarts
// answers so until its streams are ready, until RelayConfig.MaxAttempts.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !p.nc.IsConnected() {
		return fmt.Errorf("%w (%s)", ErrNotConnected, p.nc.Status())
	}
	reconnects := p.nc.Stats().Reconnects
	return outbox.PublishInRounds(ctx, msgs, func(ctx context.Context, round []outbox.Message) []error {
		return p.send(ctx, round, reconnects)
	})
}

// send publishes round asynchronously and waits for every ack.
func (p *Publisher) send(ctx context.Context, round []outbox.Message, reconnects uint64) []error {
	errs := make([]error, len(round))
	futures := make([]jetstream.PubAckFuture, len(round))
	for i, m := range round {
		if p.nc.Stats().Reconnects != reconnects || !p.nc.IsConnected() {
			for j := i; j < len(round); j++ {
				errs[j] = ErrReconnected
			}
			break
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
		if errors.Is(err, nats.ErrMaxPayload) { // refused before it was sent: the next may go
			errs[i] = outbox.Permanent(fmt.Errorf("natspub: publish to %q: %w", m.Destination, err))
			continue
		}
		if err != nil {
			for j := i; j < len(round); j++ {
				errs[j] = fmt.Errorf("natspub: publish to %q: %w", m.Destination, err)
			}
			break
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = fmt.Errorf("natspub: publish to %q: %w", round[i].Destination, err)
			if permanent(err) {
				errs[i] = outbox.Permanent(errs[i])
			}
		case <-ctx.Done():
			errs[i] = fmt.Errorf("natspub: publish to %q: no ack: %w", round[i].Destination, ctx.Err())
		}
	}
	return errs
}

// permanent reports whether JetStream refused a message for itself, so
// that publishing it again would fail again: it is larger than its stream
// allows. No stream for a subject (jetstream.ErrNoStreamResponse) is not
// permanent: a server that restarts answers so until its streams are
// ready.
func permanent(err error) bool {
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum)
}
