package amqppub

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/outbox"
)

// Errors of a message the broker did not take.
var (
	// ErrUnroutable: the broker returned the message, mandatory, because
	// no queue is bound for its routing key.
	ErrUnroutable = errors.New("amqppub: message returned unroutable")
	// ErrNacked: the broker confirmed the message negatively.
	ErrNacked = errors.New("amqppub: message nacked by the broker")
	// ErrConnection: the connection or channel could not be opened or was
	// lost before the broker confirmed the message.
	ErrConnection = errors.New("amqppub: connection to the broker failed")
	// ErrClosed: Publish after Close.
	ErrClosed = errors.New("amqppub: publisher closed")
	// ErrRefused: the broker closed the channel because the exchange
	// does not exist (404 NOT_FOUND) or may not be published to (403
	// ACCESS_REFUSED). It comes as an outbox.PermanentError: the relay
	// moves the rows to the dead rows rather than retrying them.
	ErrRefused = errors.New("amqppub: the broker refused the exchange")
)

// Publisher publishes outbox messages to RabbitMQ. Create it with [New];
// Close it when done. Calls of Publish run one at a time.
type Publisher struct {
	url  string
	o    options
	mu   sync.Mutex // one Publish at a time; guards the fields below
	conn *amqp.Connection
	ch   *amqp.Channel
	// returns and closed are the channel's notifications.
	returns chan amqp.Return
	closed  chan *amqp.Error
	// closeErr is why the channel closed, once read from closed.
	closeErr *amqp.Error
	done     bool
}

var _ outbox.Publisher = (*Publisher)(nil)

type options struct {
	exchange    string
	config      amqp.Config
	idHeader    string
	transient   bool
	dialTimeout time.Duration
}

// Option configures a [Publisher].
type Option func(*options) error

// WithExchange publishes to the named exchange, with each message's
// Destination as the routing key. Default "": the default exchange, where
// the routing key names a queue.
func WithExchange(name string) Option {
	return func(o *options) error {
		if len(name) > 255 {
			return fmt.Errorf("amqppub: WithExchange(%q): longer than 255 bytes", name)
		}
		o.exchange = name
		return nil
	}
}

// WithConfig sets the amqp091 connection config (TLS, vhost, heartbeat,
// properties). Its Dial, if nil, dials with a 30s timeout.
func WithConfig(cfg amqp.Config) Option {
	return func(o *options) error {
		o.config = cfg
		return nil
	}
}

// WithIDHeader also puts the message ID in the named header, for consumers
// that read their idempotency key from a header ("idempotency-key").
// Default: only the message-id property.
func WithIDHeader(name string) Option {
	return func(o *options) error {
		if name == "" || len(name) > 255 {
			return fmt.Errorf("amqppub: WithIDHeader(%q): must be 1 to 255 bytes", name)
		}
		o.idHeader = name
		return nil
	}
}

// WithTransient publishes with delivery mode 1 (transient). Default:
// persistent, so that a message confirmed by a durable queue survives a
// broker restart, as a message the relay marked sent must.
func WithTransient() Option {
	return func(o *options) error {
		o.transient = true
		return nil
	}
}

// New returns a Publisher that dials url (amqp:// or amqps://) on its
// first Publish. It fails when url is not such a URL or an option is
// invalid; it does not dial.
func New(rawURL string, opts ...Option) (*Publisher, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		return nil, errors.New("amqppub: New: the URL must be amqp://… or amqps://…")
	}
	p := &Publisher{url: rawURL, o: options{dialTimeout: 30 * time.Second}}
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("amqppub: New: nil Option")
		}
		if err := opt(&p.o); err != nil {
			return nil, err
		}
	}
	if p.o.config.Dial == nil {
		p.o.config.Dial = amqp.DefaultDial(p.o.dialTimeout)
	}
	return p, nil
}

// Close closes the connection, if open. Publish fails with [ErrClosed]
// afterwards. Close is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	p.drop()
	return nil
}

// drop closes the connection, if any.
func (p *Publisher) drop() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.ch = nil, nil
}

// open returns the channel, dialling a new connection if there is none or
// it was lost.
func (p *Publisher) open() error {
	if p.ch != nil {
		select {
		case <-p.closed:
		default:
			// NotifyClose is sent after the channel is marked closed:
			// a call in between must not take it for open.
			if !p.ch.IsClosed() && !p.conn.IsClosed() {
				return nil
			}
		}
	}
	p.drop()
	// Not reached, or not let in: nothing of a message.
	conn, err := amqp.DialConfig(p.url, p.o.config)
	if err != nil {
		return outbox.Unavailable(fmt.Errorf("%w: %w", ErrConnection, err))
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return outbox.Unavailable(fmt.Errorf("%w: %w", ErrConnection, err))
	}
	p.conn, p.ch = conn, ch
	p.returns = ch.NotifyReturn(make(chan amqp.Return, 64))
	p.closed = ch.NotifyClose(make(chan *amqp.Error, 1))
	p.closeErr = nil
	return nil
}

// Publish publishes msgs and waits for the broker's confirms; see
// outbox.Publisher. A message fails with [ErrUnroutable] when no queue
// took it, [ErrNacked] on a negative confirm, [ErrConnection] when the
// connection could not be opened or was lost first, and ctx's error when
// ctx ended first; the relay retries those. The failures that say the
// broker could not be reached come as an [outbox.UnavailableError], which
// counts no attempt of the message (the relay backs off and tries again,
// however long the outage): a connection that could not be opened (dial
// errors, and a broker that would not let the client in), a connection or
// channel lost before the confirm (an I/O error, the broker shutting down
// with 320 CONNECTION_FORCED), and a confirm that did not come before ctx
// ended. A channel the broker closed for another reason, a nack and an
// unroutable message are refusals, retried until RelayConfig.MaxAttempts;
// a channel closed for one message of several is charged to that one
// alone: the Publisher sends the others again, each alone, to find it,
// and a message the broker refused as malformed or not acceptable (406
// PRECONDITION_FAILED: a CC header, which RabbitMQ routes by and takes
// only as an array) fails as permanent. It fails with an
// [outbox.PermanentError] wrapping [ErrRefused], which the relay does not
// retry, when the broker closed the channel because the exchange does not
// exist or may not be published to: every message of the Publisher goes
// to that exchange, and every one would fail the same way. Declare the
// exchange before the relay runs, or redrive the dead rows (outbox.Redrive)
// after. A message whose properties cannot be sent fails alone, unsent,
// with an outbox.PermanentError wrapping [ErrPropertiesTooLarge]: the
// other messages of the call are published, but for the later ones of
// its key, held back (outbox.ErrHeldBack).
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := p.open(); err != nil {
		return err
	}
	err := outbox.PublishInRounds(ctx, msgs, func(ctx context.Context, round []outbox.Message) []error {
		// A round follows only the confirmed messages of its keys: it
		// may go out on a new channel when a message of the round before
		// made the broker close the last one.
		if err := p.open(); err != nil {
			errs := make([]error, len(round))
			fill(errs, err)
			return errs
		}
		return p.send(ctx, p.ch, round)
	})
	if ctx.Err() != nil || errors.Is(err, ErrConnection) {
		// Confirms and returns of this call may still arrive, or the
		// connection is lost: the next call starts on a connection of
		// its own.
		p.drop()
	}
	return err
}

// send publishes round on ch and waits for every confirm, reading the
// returns meanwhile: the broker sends a message's return before its
// confirm, so once the last confirm is in, every return of the round is.
func (p *Publisher) send(ctx context.Context, ch *amqp.Channel, round []outbox.Message) []error {
	errs := make([]error, len(round))
	pending, byID := p.publishRound(ctx, ch, round, errs)
	returns := p.returns // nil once closed, with the channel
	returned := func(r amqp.Return, ok bool) {
		if !ok {
			returns = nil
			return
		}
		if i, ok := byID[r.MessageId]; ok {
			errs[i] = fmt.Errorf("%w: exchange %q, routing key %q: %d %s", ErrUnroutable, r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText)
		}
	}
	for i, dc := range pending {
		if dc == nil {
			continue
		}
	wait:
		for {
			select {
			case <-dc.Done():
				break wait
			case r, ok := <-returns:
				returned(r, ok)
			case <-ctx.Done():
				errs[i] = outbox.Unavailable(fmt.Errorf("amqppub: no confirm: %w", ctx.Err()))
				break wait
			}
		}
		if errs[i] == nil && !dc.Acked() {
			if ch.IsClosed() {
				errs[i] = fmt.Errorf("%w: the channel closed before the confirm", ErrConnection)
			} else {
				errs[i] = ErrNacked
			}
		}
	}
	for drained := false; returns != nil && !drained; {
		select {
		case r, ok := <-returns:
			returned(r, ok)
		default:
			drained = true
		}
	}
	if refused := p.classifyClosed(ctx, ch, errs); len(refused) > 1 {
		p.isolate(ctx, round, errs, refused)
	}
	return errs
}

// publishRound publishes the messages of round on ch, and returns their
// deferred confirms and their indexes by ID. A message whose properties
// cannot be sent fails alone, as permanent, unsent; a publish the channel
// refuses (lost with its connection) fails the rest of the round.
func (p *Publisher) publishRound(ctx context.Context, ch *amqp.Channel, round []outbox.Message, errs []error) ([]*amqp.DeferredConfirmation, map[string]int) {
	pending := make([]*amqp.DeferredConfirmation, len(round))
	byID := make(map[string]int, len(round))
	frameMax := p.conn.Config.FrameSize // as negotiated
	for i, m := range round {
		pub := p.publishing(m)
		if err := checkProperties(pub, frameMax); err != nil {
			errs[i] = outbox.Permanent(err)
			continue
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, p.o.exchange, m.Destination, true, false, pub)
		if err != nil {
			fill(errs[i:], fmt.Errorf("%w: publish: %w", ErrConnection, err))
			break
		}
		pending[i] = dc
		byID[m.ID] = i
	}
	return pending, byID
}

// classifyClosed classes the failures of messages whose channel closed
// before their confirm ([ErrConnection]): permanent when the broker
// refused the exchange, unavailable when the channel was lost with its
// connection or the broker failed of itself, else a refusal, which it
// returns the indexes of. A refusal of a single message is the message's
// own, and permanent when the broker refused it as malformed or not
// acceptable (see [refusedForGood]); several share one reason the broker
// gave for one of them, for [Publisher.isolate] to attribute.
func (p *Publisher) classifyClosed(ctx context.Context, ch *amqp.Channel, errs []error) (refused []int) {
	var reason *amqp.Error // why the broker closed the channel, if it did
	closed := ch.IsClosed()
	if closed {
		reason = p.closeReason(ctx)
	}
	for i, err := range errs {
		if !errors.Is(err, ErrConnection) || outbox.IsUnavailable(err) {
			continue
		}
		switch {
		case reason != nil && (reason.Code == amqp.NotFound || reason.Code == amqp.AccessRefused):
			errs[i] = outbox.Permanent(fmt.Errorf("%w %q: %w", ErrRefused, p.o.exchange, reason))
		case !closed || lost(reason) || reason.Code == amqp.InternalError || reason.Code == amqp.ResourceError:
			errs[i] = outbox.Unavailable(err)
		default:
			errs[i] = fmt.Errorf("amqppub: the broker closed the channel: %w", reason)
			refused = append(refused, i)
		}
	}
	if len(refused) == 1 && refusedForGood(reason) {
		errs[refused[0]] = outbox.Permanent(errs[refused[0]])
	}
	return refused
}

// refusedForGood reports whether the broker closed a channel for reason
// after a single publish because the message is malformed or not
// acceptable, as it will at every try: 406 PRECONDITION_FAILED (a CC
// header that is not an array, a body over max_message_size), or a frame,
// syntax or command error.
func refusedForGood(reason *amqp.Error) bool {
	switch reason.Code {
	case amqp.PreconditionFailed, amqp.FrameError, amqp.SyntaxError, amqp.CommandInvalid, amqp.UnexpectedFrame:
		return true
	}
	return false
}

// isolate publishes again, each alone on an open channel, the messages of
// round at refused: the broker closed their channel for one of them, and
// which one it does not say. Each then fails for itself, or is published
// (again: a message before the one refused may have reached the broker
// unconfirmed). Each is the only message of its key in the round, and the
// later ones of its key go in later rounds, so the order holds.
func (p *Publisher) isolate(ctx context.Context, round []outbox.Message, errs []error, refused []int) {
	for _, i := range refused {
		if err := p.open(); err != nil {
			errs[i] = err
			continue
		}
		errs[i] = p.send(ctx, p.ch, round[i:i+1])[0]
	}
}

// fill sets every entry of errs to err.
func fill(errs []error, err error) {
	for i := range errs {
		errs[i] = err
	}
}

// lost reports whether a channel closed for reason was lost with its
// connection rather than closed by a broker that refused something of a
// message: no reason, a reason of the client's (an I/O error), or the
// broker closing the connection (320 CONNECTION_FORCED: shutting down).
// A broker that closed the channel for another reason (406
// PRECONDITION_FAILED, say) refused the message.
func lost(reason *amqp.Error) bool {
	return reason == nil || !reason.Server || reason.Code == amqp.ConnectionForced
}

// closeReason returns why the broker closed the channel, nil if it did not
// say (the connection was lost). The channel is marked closed before the
// reason is sent: it waits for it a little.
func (p *Publisher) closeReason(ctx context.Context) *amqp.Error {
	if p.closeErr != nil {
		return p.closeErr
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case e, ok := <-p.closed:
		if ok {
			p.closeErr = e
		}
	case <-t.C:
	case <-ctx.Done():
	}
	return p.closeErr
}

// publishing is m as an AMQP message.
func (p *Publisher) publishing(m outbox.Message) amqp.Publishing {
	pub := amqp.Publishing{MessageId: m.ID, Body: m.Payload, DeliveryMode: amqp.Persistent, Timestamp: m.CreatedAt}
	if p.o.transient {
		pub.DeliveryMode = amqp.Transient
	}
	if len(m.Headers) > 0 || p.o.idHeader != "" {
		pub.Headers = make(amqp.Table, len(m.Headers)+1)
		for name, v := range m.Headers {
			pub.Headers[name] = v
			if strings.EqualFold(name, "Content-Type") {
				pub.ContentType = v
			}
		}
		if p.o.idHeader != "" {
			pub.Headers[p.o.idHeader] = m.ID
		}
	}
	return pub
}
