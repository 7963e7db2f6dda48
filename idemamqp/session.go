package idemamqp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/consumer"
)

// session is one connection of a Run: a channel that consumes and acks, a
// channel in confirm mode for the copies the consumer publishes (to the
// delay queue, to a dead-letter exchange), and the signals of their end.
// Delivery tags belong to the consuming channel: a delivery is settled on
// the session it came from, or not at all. The publishing channel is the
// session's to reopen: a dead letter the broker refuses with a channel
// error (an exchange that does not exist, a message too large) closes it,
// and neither the connection nor the deliveries in flight.
type session struct {
	conn       *amqp.Connection
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	ready      chan job     // the deliveries the claimer hands the workers (serve)
	held       atomic.Int64 // deliveries the claimer took and the consumer has not settled
	claimTook  atomic.Int64 // how long the last claim took, a time.Duration
	tags       tagLog       // the deliveries taken and not settled, for acks of runs
	tag        string
	frameSize  int // negotiated: the largest frame, 0 for no limit

	publishTimeout time.Duration // how long a publish waits for its confirm

	connClosed chan *amqp.Error
	chClosed   chan *amqp.Error
	cancelled  chan string

	pubMu     sync.Mutex
	pub       *amqp.Channel // nil until opened, and once closed
	pubClosed chan *amqp.Error
	returns   chan amqp.Return

	deadOnce sync.Once
	dead     chan struct{} // closed once the session is known to be broken or closed
}

// Timeouts of the broker calls the consumer makes on its own.
const (
	connectTimeout = 30 * time.Second
	publishTimeout = 10 * time.Second
)

// connect dials the broker and subscribes to the queue.
func (r *runner) connect(ctx context.Context) (s *session, err error) {
	o := &r.c.o
	cfg := o.config
	if cfg.Properties == nil {
		cfg.Properties = amqp.NewConnectionProperties()
	} else {
		cfg.Properties = maps.Clone(cfg.Properties)
	}
	if _, ok := cfg.Properties["connection_name"]; !ok {
		cfg.Properties["connection_name"] = "idemamqp " + r.c.queue
	}
	if cfg.Dial == nil {
		cfg.Dial = dialContext(ctx)
	}
	conn, err := amqp.DialConfig(r.c.url, cfg)
	if err != nil {
		return nil, fmt.Errorf("idemamqp: dial: %w", err)
	}
	s = &session{conn: conn, dead: make(chan struct{}), tag: "idemamqp-" + rand.Text(),
		frameSize: conn.Config.FrameSize, publishTimeout: o.pubTimeout}
	opened := s // s is nil once an error is returned
	defer func() {
		if err != nil {
			opened.close()
		}
	}()
	s.connClosed = conn.NotifyClose(make(chan *amqp.Error, 1))

	if err := r.declareDelayQueue(conn); err != nil {
		return nil, err
	}
	if !r.checked {
		if err := r.checkDeadLetter(conn); err != nil {
			return nil, err
		}
		r.checked = true
	}
	if err := s.openPub(); err != nil {
		return nil, err
	}

	if s.ch, err = conn.Channel(); err != nil {
		return nil, fmt.Errorf("idemamqp: open the consuming channel: %w", err)
	}
	s.chClosed = s.ch.NotifyClose(make(chan *amqp.Error, 1))
	s.cancelled = s.ch.NotifyCancel(make(chan string, 1))
	if err := s.ch.Qos(o.prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("idemamqp: prefetch %d: %w", o.prefetch, err)
	}
	if s.deliveries, err = s.ch.Consume(r.c.queue, s.tag, false, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("idemamqp: consume queue %q: %w", r.c.queue, err)
	}
	return s, nil
}

// dialContext is the default Config.Dial: a TCP dial that ctx cancels, and
// a deadline for the handshakes that amqp091 clears once it is connected.
func dialContext(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: connectTimeout}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := conn.SetDeadline(time.Now().Add(connectTimeout)); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

// checkDeadLetter returns a *consumer.DeadLetterMissingError when the
// broker says the WithDeadLetter exchange, or, through the default
// exchange, the queue its routing key names, is not declared or may not
// be used (404 NOT_FOUND, 403 ACCESS_REFUSED): a poison delivery would
// have nowhere to go. (Whether a named exchange routes the key anywhere
// cannot be asked: an unroutable dead letter is refused at run time.)
func (r *runner) checkDeadLetter(conn *amqp.Connection) error {
	o := &r.c.o
	if !o.DeadLetters() {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("idemamqp: open a channel: %w", err)
	}
	defer ch.Close()
	to := o.deadLetter
	what := fmt.Sprintf("exchange %q", to.exchange)
	if to.exchange == "" {
		what = fmt.Sprintf("queue %q (through the default exchange)", to.routingKey)
		_, err = ch.QueueDeclarePassive(to.routingKey, false, false, false, false, nil)
	} else {
		err = ch.ExchangeDeclarePassive(to.exchange, amqp.ExchangeDirect, false, false, false, false, nil)
	}
	var aerr *amqp.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &aerr) && (aerr.Code == amqp.NotFound || aerr.Code == amqp.AccessRefused):
		return &consumer.DeadLetterMissingError{Destination: what, Err: err}
	}
	return fmt.Errorf("idemamqp: checking the dead-letter %s: %w", what, err)
}

// declareDelayQueue declares the delay queue: durable, holding each
// message for the busy delay and then dead-lettering it through the
// default exchange back to the queue. If the queue exists with other
// arguments (PRECONDITION_FAILED), it is used as it is.
func (r *runner) declareDelayQueue(conn *amqp.Connection) error {
	o := &r.c.o
	name := *o.delayQueue
	if name == "" {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("idemamqp: open a channel: %w", err)
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(name, true, false, false, false, amqp.Table{
		"x-message-ttl":             o.BusyDelay().Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": r.c.queue,
	})
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed {
		if err != nil {
			return fmt.Errorf("idemamqp: declare the delay queue %q: %w", name, err)
		}
		return nil
	}
	// The failed declare closed the channel.
	ch2, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("idemamqp: open a channel: %w", err)
	}
	defer ch2.Close()
	if _, err := ch2.QueueDeclarePassive(name, true, false, false, false, nil); err != nil {
		return fmt.Errorf("idemamqp: the delay queue %q: %w", name, err)
	}
	r.c.o.Logger().Info("idemamqp: the delay queue exists with other arguments; using it as it is",
		slog.String("queue", r.c.queue), slog.String("delay_queue", name), slog.String("declare_error", aerr.Reason))
	return nil
}

// watch waits until ctx ends, when it cancels the subscription and
// returns nil, or until the session breaks, when it returns why.
func (s *session) watch(ctx context.Context) error {
	select {
	case <-ctx.Done():
		// Stop the broker's deliveries; those already sent stay
		// unacknowledged and are requeued when the channel closes.
		s.ch.Cancel(s.tag, false)
		return nil
	case e := <-s.connClosed:
		return s.broken(closeErr("connection", e))
	case e := <-s.chClosed:
		return s.broken(closeErr("channel", e))
	case tag := <-s.cancelled:
		return s.broken(fmt.Errorf("idemamqp: the broker cancelled the subscription %s (queue deleted?)", tag))
	}
}

// broken marks the session dead and returns err.
func (s *session) broken(err error) error {
	s.markDead()
	return err
}

func closeErr(what string, e *amqp.Error) error {
	if e == nil {
		return fmt.Errorf("idemamqp: the %s closed", what)
	}
	return fmt.Errorf("idemamqp: the %s closed: %w", what, e)
}

func (s *session) markDead() { s.deadOnce.Do(func() { close(s.dead) }) }

func (s *session) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// close closes the connection; the broker requeues every delivery of the
// session not settled.
func (s *session) close() {
	s.markDead()
	s.conn.Close()
}

// openPub opens the publishing channel, in confirm mode, unless it is
// open. The caller holds pubMu, or owns the session alone.
func (s *session) openPub() error {
	if s.pub != nil {
		return nil
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("idemamqp: open the publishing channel: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return fmt.Errorf("idemamqp: confirm mode: %w", err)
	}
	// The channel blocks on this one until it is read: publish drains it.
	s.pub, s.pubClosed, s.returns = ch, closed, ch.NotifyReturn(make(chan amqp.Return, 4))
	return nil
}

// refusedError is a publish the broker answered, and said no to: a nack,
// an unroutable message returned, a channel error (an exchange that does
// not exist or may not be written, a message over the max message size).
// Any other error of publish is an outage: the broker was not reached, or
// did not answer in time.
type refusedError struct {
	err error
	// strip: the message as it is cannot be taken (the broker's
	// precondition failed, as it does for a message over its max message
	// size; or it could not be encoded), where one without the original's
	// body and headers may be.
	strip bool
}

func (e *refusedError) Error() string {
	return "idemamqp: the broker refused the message: " + e.err.Error()
}
func (e *refusedError) Unwrap() error { return e.err }

// errNack is the cause of a refusal by nack.
var errNack = errors.New("nack")

// publish publishes p with the mandatory flag and waits for the broker's
// confirm; the error is a *refusedError when the broker said no. One
// publish at a time: a message the broker cannot route comes back
// (basic.return) before its confirm, so a return seen after the confirm is
// this publish's; and a channel error closes the channel of this publish
// only.
func (s *session) publish(ctx context.Context, exchange, key string, p amqp.Publishing) error {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if err := s.openPub(); err != nil {
		return err
	}
	for len(s.returns) > 0 {
		<-s.returns // of an earlier publish that timed out
	}
	ctx, cancel := context.WithTimeout(ctx, s.publishTimeout)
	defer cancel()
	conf, err := s.pub.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, p)
	switch {
	case errors.Is(err, amqp.ErrClosed):
		return s.pubFailed()
	case err != nil:
		// Nothing was sent: the message cannot be encoded (a header
		// of a type amqp091 does not write).
		return &refusedError{err: err, strip: true}
	}
	acked, err := conf.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("idemamqp: no confirm from the broker: %w", err)
	case !acked:
		select {
		case e := <-s.pubClosed:
			// The channel closed: amqp091 tells its close before it
			// ends its confirms, unacknowledged.
			return s.closedBy(e)
		default:
			return &refusedError{err: errNack}
		}
	}
	select {
	case ret, ok := <-s.returns:
		if ok {
			return &refusedError{err: fmt.Errorf("unroutable: %d %s", ret.ReplyCode, ret.ReplyText)}
		}
		return s.pubFailed()
	default:
		return nil
	}
}

// pubFailed forgets the publishing channel, which closed, and returns why
// it closed (see closedBy).
func (s *session) pubFailed() error {
	select {
	case e := <-s.pubClosed:
		return s.closedBy(e)
	case <-time.After(time.Second): // amqp091 tells the close before the channel's calls fail
		return s.closedBy(nil)
	}
}

// closedBy forgets the publishing channel, which e closed, and returns a
// refusal when the broker closed it for the publish (a channel error), an
// outage otherwise.
func (s *session) closedBy(e *amqp.Error) error {
	s.pub = nil
	if e == nil {
		return errors.New("idemamqp: the publishing channel closed")
	}
	switch e.Code {
	case amqp.NotFound, amqp.AccessRefused, amqp.ResourceLocked, amqp.NotAllowed:
		return &refusedError{err: e}
	case amqp.PreconditionFailed:
		return &refusedError{err: e, strip: true}
	}
	return fmt.Errorf("idemamqp: the publishing channel closed: %w", e)
}

// publishing returns a message to publish with d's properties but
// user-id (RabbitMQ refuses a user-id other than the publishing
// connection's own), headers and body.
func publishing(d amqp.Delivery, headers amqp.Table, body []byte) amqp.Publishing {
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            body,
	}
}

// returned is d as it comes back to queue from the delay queue: through
// the default exchange, routed by the queue's name, without user-id or
// expiration, its steering headers renamed (defused), not marked
// redelivered.
func returned(d amqp.Delivery, queue string) amqp.Delivery {
	d.Acknowledger = nil
	d.Headers = defused(d.Headers)
	d.Exchange, d.RoutingKey = "", queue
	d.UserId, d.Expiration = "", ""
	d.Redelivered = false
	return d
}
