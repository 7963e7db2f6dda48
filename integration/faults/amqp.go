package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp"
)

func init() {
	brokers["amqp"] = newAMQP
	consumeFuncs["amqp"] = consumeAMQP
}

// amqpBusyDelay is the consumers' busy delay: it names the delay queue
// idemamqp declares beside the run's queue.
const amqpBusyDelay = 200 * time.Millisecond

// amqpBroker is a queue of the run's own on the machine's RabbitMQ.
type amqpBroker struct {
	serverURL string
	queue     string
	conn      *amqp.Connection
	ch        *amqp.Channel
}

func newAMQP(run string) (broker, error) {
	return &amqpBroker{serverURL: envOr("IDEM_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), queue: "idemfaults." + run}, nil
}

func (b *amqpBroker) name() string    { return "amqp" }
func (b *amqpBroker) target() string  { return b.queue }
func (b *amqpBroker) durable() string { return "" }

func (b *amqpBroker) upstreams() ([]string, error) { return urlHost(b.serverURL) }

// consumerURL is the server's URL with the proxy's address.
func (b *amqpBroker) consumerURL(proxies []string) string {
	u, err := url.Parse(b.serverURL)
	if err != nil {
		return b.serverURL
	}
	u.Host = proxies[0]
	return u.String()
}

// probe connects, and checks that rabbitmqctl can list queues: the
// protocol's own queue.declare counts ready messages only, and a run ends
// when no message is ready or unacked.
func (b *amqpBroker) probe(ctx context.Context) error {
	conn, err := amqp.Dial(b.serverURL)
	if err != nil {
		return fmt.Errorf("RabbitMQ at %s (IDEM_AMQP_URL): %w", redactURL(b.serverURL), err)
	}
	conn.Close()
	if _, err := queueMessages(ctx); err != nil {
		return err
	}
	return nil
}

func (b *amqpBroker) setup(ctx context.Context, _ brokerEnv) error {
	conn, err := amqp.Dial(b.serverURL)
	if err != nil {
		return fmt.Errorf("RabbitMQ at %s: %w", redactURL(b.serverURL), err)
	}
	b.conn = conn
	if b.ch, err = conn.Channel(); err != nil {
		return err
	}
	if _, err := b.ch.QueueDeclare(b.queue, true, false, false, false, nil); err != nil {
		return err
	}
	return b.ch.Confirm(false)
}

func (b *amqpBroker) publish(ctx context.Context, key string, payload []byte) error {
	dc, err := b.ch.PublishWithDeferredConfirmWithContext(ctx, "", b.queue, true, false, amqp.Publishing{
		Headers: amqp.Table{keyHeader: key}, Body: payload, DeliveryMode: amqp.Persistent,
	})
	if err != nil {
		return err
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("not confirmed: %v", err)
	}
	return nil
}

// unsettled counts the messages ready or unacked in the run's queue and in
// its delay queue, as rabbitmqctl lists them.
func (b *amqpBroker) unsettled(ctx context.Context) (int, error) {
	counts, err := queueMessages(ctx)
	if err != nil {
		return 0, err
	}
	return counts[b.queue] + counts[idemamqp.DelayQueueName(b.queue, amqpBusyDelay)], nil
}

// queueMessages returns the messages (ready and unacked) of every queue.
func queueMessages(ctx context.Context) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", "list_queues", "-q", "--no-table-headers", "name", "messages").Output()
	if err != nil {
		return nil, fmt.Errorf("rabbitmqctl list_queues: %w", err)
	}
	counts := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		if n, err := strconv.Atoi(f[1]); err == nil {
			counts[f[0]] = n
		}
	}
	return counts, nil
}

func (b *amqpBroker) close(ctx context.Context) error {
	if b.conn == nil {
		return nil
	}
	defer b.conn.Close()
	if _, err := b.ch.QueueDelete(b.queue, false, false, false); err != nil {
		return err
	}
	_, err := b.ch.QueueDelete(idemamqp.DelayQueueName(b.queue, amqpBusyDelay), false, false, false)
	return err
}

// redactURL drops the password of a URL for messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(invalid URL)"
	}
	return u.Redacted()
}

// consumeAMQP is the consumer process on RabbitMQ: idemamqp, reconnecting
// through the harness's proxy.
func consumeAMQP(ctx context.Context, s consumerSpec, g *idem.Guard, fc *consumer) error {
	h := fc.handle
	c, err := idemamqp.New(g, s.BrokerURL, s.Target, func(ctx context.Context, d amqp.Delivery) error {
		key, _ := d.Headers[keyHeader].(string)
		return h(ctx, key, d.Body, func() { d.Ack(false) })
	},
		idemamqp.WithSharedScope(),
		idemamqp.WithKeyHeader(keyHeader),
		idemamqp.WithPrefetch(16),
		idemamqp.WithBusyDelay(amqpBusyDelay),
		idemamqp.WithRetryBackoff(s.RetryDelay, time.Second),
		// A ledger cut off by a fault fails handlers for as long as the
		// fault lasts: that is no poison. Any poison fails the run
		// (evDead), and is rejected to nowhere: the run's queue has no
		// dead-letter exchange.
		idemamqp.WithMaxAttempts(1000),
		idemamqp.WithDiscardPoison(),
		idemamqp.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond),
		idemamqp.WithObserver(func(_ context.Context, e idemamqp.Event) {
			switch e.Kind {
			case idemamqp.EventConnected:
				events.emit(evReady)
			case idemamqp.EventAcked:
				events.emit(evAcked, e.Key)
			case idemamqp.EventDeadLettered, idemamqp.EventDiscarded:
				events.emit(evDead, e.Key, string(e.Reason))
			}
		}),
	)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}
