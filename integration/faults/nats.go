package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
)

// keyHeader carries each message's key. Not Nats-Msg-Id: JetStream would
// drop the duplicates the harness publishes on purpose.
const keyHeader = "Idem-Key"

func init() {
	brokers["nats"] = newNATS
	consumeFuncs["nats"] = consumeNATS
}

// natsBroker is a JetStream stream of the run's own on the machine's NATS
// server, with one durable pull consumer the K processes share.
type natsBroker struct {
	serverURL string
	stream    string
	nc        *nats.Conn
	js        jetstream.JetStream
}

func newNATS(run string) (broker, error) {
	return &natsBroker{serverURL: envOr("IDEM_NATS_URL", "nats://127.0.0.1:4222"), stream: "IDEMFAULTS_" + run}, nil
}

func (b *natsBroker) name() string    { return "nats" }
func (b *natsBroker) target() string  { return b.stream }
func (b *natsBroker) durable() string { return "faults" }

func (b *natsBroker) upstreams() ([]string, error) { return urlHost(b.serverURL) }

func (b *natsBroker) consumerURL(proxies []string) string { return "nats://" + proxies[0] }

func (b *natsBroker) probe(context.Context) error {
	nc, err := nats.Connect(b.serverURL, nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("NATS at %s (IDEM_NATS_URL): %w", b.serverURL, err)
	}
	nc.Close()
	return nil
}

// setup creates the stream and the durable consumer. AckWait is short, so
// the messages a killed process held come back soon.
func (b *natsBroker) setup(ctx context.Context, _ brokerEnv) error {
	nc, err := nats.Connect(b.serverURL, nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("NATS at %s: %w", b.serverURL, err)
	}
	b.nc = nc
	if b.js, err = jetstream.New(nc); err != nil {
		return err
	}
	if _, err = b.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: b.stream, Subjects: []string{b.stream + ".>"}, Storage: jetstream.MemoryStorage,
	}); err != nil {
		return fmt.Errorf("creating stream %s: %w", b.stream, err)
	}
	_, err = b.js.CreateOrUpdateConsumer(ctx, b.stream, jetstream.ConsumerConfig{
		Durable: b.durable(), AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxDeliver: -1,
	})
	return err
}

func (b *natsBroker) publish(ctx context.Context, key string, payload []byte) error {
	msg := nats.NewMsg(b.stream + ".pay")
	msg.Header.Set(keyHeader, key)
	msg.Data = payload
	_, err := b.js.PublishMsg(ctx, msg)
	return err
}

// unsettled is how many messages are neither delivered nor acked.
func (b *natsBroker) unsettled(ctx context.Context) (int, error) {
	c, err := b.js.Consumer(ctx, b.stream, b.durable())
	if err != nil {
		return 0, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.NumPending) + info.NumAckPending, nil
}

func (b *natsBroker) close(ctx context.Context) error {
	if b.nc == nil {
		return nil
	}
	defer b.nc.Close()
	err := b.js.DeleteStream(ctx, b.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	return err
}

// consumeNATS is the consumer process on NATS: idemnats over the shared
// durable consumer, reconnecting through the harness's proxy.
func consumeNATS(ctx context.Context, s consumerSpec, g *idem.Guard, fc *consumer) error {
	h := fc.handle
	nc, err := nats.Connect(s.BrokerURL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.Timeout(2*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, s.Target, s.Durable)
	if err != nil {
		return err
	}
	c, err := idemnats.New(g, cons, func(ctx context.Context, msg jetstream.Msg) error {
		// The broken build's early ack waits for the server's
		// confirmation: it must be acked before anything else happens.
		return h(ctx, msg.Headers().Get(keyHeader), msg.Data(), func() { msg.DoubleAck(ctx) })
	},
		idemnats.WithSharedScope(),
		idemnats.WithKeyHeader(keyHeader),
		idemnats.WithBatchSize(16),
		idemnats.WithFetchWait(time.Second),
		idemnats.WithBusyDelay(s.BusyDelay),
		idemnats.WithRetryBackoff(s.RetryDelay, time.Second),
		// A ledger cut off by a fault fails handlers for as long as the
		// fault lasts: that is no poison. Any poison fails the run
		// (evDead), and is terminated.
		idemnats.WithMaxAttempts(1000),
		idemnats.WithDiscardPoison(),
		idemnats.WithObserver(func(_ context.Context, e idemnats.Event) {
			switch e.Kind {
			case idemnats.EventAcked:
				events.emit(evAcked, e.Key)
			case idemnats.EventDeadLettered, idemnats.EventDiscarded:
				events.emit(evDead, e.Key, string(e.Reason))
			}
		}),
	)
	if err != nil {
		return err
	}
	events.emit(evReady)
	return c.Run(ctx)
}
