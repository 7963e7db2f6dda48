package idemnats_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/consumer/consumertest"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/internal/testenv"
)

// The behaviour suite every idem consumer passes, on the NATS server of
// IDEM_NATS_URL.
func TestConsumerSuite(t *testing.T) { consumertest.Run(t, jetStream{}) }

// suiteKeyHeader carries the suite's keys. Not Nats-Msg-Id: the stream's
// duplicate window would drop a copy published with the same id before the
// consumer saw it, and the suite's duplicates must reach the consumer.
const suiteKeyHeader = "idempotency-key"

// suiteAckWait is the AckWait of the suite's consumers: what a message
// sent to a pull request that died with a cut connection waits before it
// is delivered again.
const suiteAckWait = 5 * time.Second

// jetStream is consumertest's harness: a stream and a durable pull
// consumer per case, a dead-letter stream of the case's own, a consumer
// whose connection goes through a proxy that Cut drops, one fetch loop.
type jetStream struct{}

// MaxBody is the server's max_payload less room for the key header: the
// largest body the server takes in the suite's message of key "big".
func (jetStream) MaxBody() int {
	nc, err := nats.Connect(natsURL, nats.Timeout(3*time.Second))
	if err != nil {
		return 1 << 20
	}
	defer nc.Close()
	return int(nc.MaxPayload()) - 64
}

// MaxHeader is what the key header's value may hold when the message's
// header block fits the 64 KiB a JetStream stream stores ("header size
// exceeds maximum allowed of 64k"): less the block's own line and end and
// the key header's name, with a few bytes of margin.
func (jetStream) MaxHeader() int { return 1<<16 - 1 - 64 }

// Ordered is false: a naked message lets the others of its stream pass,
// with a single fetch loop too (its batch goes on past it, and the next
// Fetch takes the messages after it).
func (jetStream) Ordered() bool { return false }

func (b jetStream) New(t *testing.T, cfg consumertest.Config) error {
	_, js := connect(t, natsURL)
	s := newStream(t, js, jetstream.StreamConfig{})
	cons := newConsumer(t, s, jetstream.ConsumerConfig{AckWait: suiteAckWait})
	_, err := b.consumer(t, js, js, cons, cfg)
	return err
}

func (b jetStream) Start(t *testing.T, cfg consumertest.Config) consumertest.Consumer {
	_, js := connect(t, natsURL)
	s := newStream(t, js, jetstream.StreamConfig{})
	direct := newConsumer(t, s, jetstream.ConsumerConfig{AckWait: suiteAckWait})
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	if port == "" {
		port = "4222"
	}
	p := testenv.StartProxy(t, net.JoinHostPort(u.Hostname(), port))
	// The consumer's own connection, through the proxy: its fetches, acks
	// and dead letters.
	_, pjs := connect(t, "nats://"+p.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectJitter(0, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := pjs.Consumer(ctx, s.CachedInfo().Config.Name, "workers")
	if err != nil {
		t.Fatal(err)
	}
	r := &harnessRun{js: js, cons: direct, subject: subject(s, "in"), p: p}
	if cfg.Poison == consumertest.PoisonDeadLetter {
		r.dead = newStream(t, js, jetstream.StreamConfig{})
	}
	c, err := b.consumer(t, pjs, js, cons, cfg, r.dead)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.run = consumertest.Go(c.Run)
	t.Cleanup(func() { r.Stop(t) })
	return r
}

// consumer returns the consumer of cons that cfg describes; its dead
// letters go through pjs, to the stream dead (PoisonDeadLetter), or to a
// subject no stream takes (PoisonRefused).
func (jetStream) consumer(t *testing.T, pjs, js jetstream.JetStream, cons jetstream.Consumer, cfg consumertest.Config, dead ...jetstream.Stream) (*idemnats.Consumer, error) {
	opts := []idemnats.Option{
		idemnats.WithKeyHeader(suiteKeyHeader),
		idemnats.WithConcurrency(1),
		idemnats.WithFetchWait(500 * time.Millisecond),
		idemnats.WithRetryBackoff(cfg.RetryFirst, cfg.RetryLongest),
		idemnats.WithBusyDelay(cfg.BusyDelay),
		idemnats.WithDrainTimeout(cfg.DrainTimeout),
	}
	switch cfg.Scope {
	case consumertest.ScopeShared:
		opts = append(opts, idemnats.WithSharedScope())
	case consumertest.ScopeHeader:
		opts = append(opts, idemnats.WithScope(func(m jetstream.Msg) string {
			userFunc(cfg, "scope", m)
			return m.Headers().Get("tenant")
		}))
	}
	if cfg.UserFunc != nil {
		opts = append(opts,
			idemnats.WithKeyFunc(func(m jetstream.Msg) (string, error) {
				userFunc(cfg, "key", m)
				return m.Headers().Get(suiteKeyHeader), nil
			}),
			idemnats.WithFingerprint(func(m jetstream.Msg) []byte {
				userFunc(cfg, "fingerprint", m)
				return m.Data()
			}),
			idemnats.WithObserver(func(context.Context, idemnats.Event) { cfg.UserFunc("observer", consumertest.Received{}) }))
	}
	switch cfg.Poison {
	case consumertest.PoisonDeadLetter:
		subj := "IDEMTEST_DEAD_" + random(6)
		if len(dead) > 0 && dead[0] != nil {
			subj = subject(dead[0], "dead")
		}
		opts = append(opts, idemnats.WithDeadLetter(pjs, subj))
	case consumertest.PoisonRefused:
		opts = append(opts, idemnats.WithDeadLetter(pjs, "IDEMTEST_NO_STREAM_"+random(6)+".dead"))
	case consumertest.PoisonDiscard:
		opts = append(opts, idemnats.WithDiscardPoison())
	}
	if cfg.MaxAttempts != 0 {
		opts = append(opts, idemnats.WithMaxAttempts(cfg.MaxAttempts))
	}
	if cfg.UnkeyedUnguarded {
		opts = append(opts, idemnats.WithUnkeyedUnguarded())
	}
	h := func(ctx context.Context, msg jetstream.Msg) error { return cfg.Handler(ctx, received(msg)) }
	return idemnats.New(cfg.Guard, cons, h, opts...)
}

// received is msg as the suite's handler gets it.
func received(msg jetstream.Msg) consumertest.Received {
	return consumertest.Received{Key: msg.Headers().Get(suiteKeyHeader), Body: msg.Data(), Headers: lastValues(msg.Headers())}
}

// userFunc calls cfg's UserFunc, if any, as the function fn of msg.
func userFunc(cfg consumertest.Config, fn string, msg jetstream.Msg) {
	if cfg.UserFunc != nil {
		cfg.UserFunc(fn, received(msg))
	}
}

// lastValues returns every header's last value.
func lastValues(h nats.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) > 0 {
			out[k] = vs[len(vs)-1]
		}
	}
	return out
}

// harnessRun is a consumer of the harness, running.
type harnessRun struct {
	js      jetstream.JetStream // a connection of the harness's own, not cut
	cons    jetstream.Consumer  // the consumer, through js
	subject string
	dead    jetstream.Stream // nil unless PoisonDeadLetter
	p       *testenv.Proxy
	run     *consumertest.Running
}

func (r *harnessRun) Publish(t *testing.T, m consumertest.Message) {
	t.Helper()
	msg := &nats.Msg{Subject: r.subject, Data: m.Body, Header: nats.Header{}}
	if !m.NoKey {
		msg.Header.Set(suiteKeyHeader, m.Key)
	}
	for k, v := range m.Headers {
		msg.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func (r *harnessRun) DeadLetters(t *testing.T) []consumertest.DeadLetter {
	t.Helper()
	if r.dead == nil {
		return nil
	}
	var out []consumertest.DeadLetter
	for _, m := range deadLetters(t, r.dead) {
		out = append(out, consumertest.DeadLetter{Body: m.Data, Headers: lastValues(m.Header)})
	}
	return out
}

func (r *harnessRun) Stop(t *testing.T) error { return r.run.Stop(t) }

func (r *harnessRun) Cut(t *testing.T) { r.p.Drop() }

// Settled reports whether the consumer has no message left to deliver nor
// any delivered and not acked or terminated.
func (r *harnessRun) Settled(t *testing.T) bool { return drained(t, r.cons) }
