package idemkafka_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/consumer/consumertest"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemkafka/internal/kafkatest"
	"github.com/idemgo/idem/internal/testenv"
)

// The behaviour suite every idem consumer passes, on the Apache Kafka of
// IDEM_KAFKA_BROKERS.
func TestConsumerSuite(t *testing.T) {
	t.Parallel()
	consumertest.Run(t, kafka{brokers: kafkatest.Brokers(t)})
}

// kafka is consumertest's harness: a topic of one partition per case, a
// dead-letter topic of its own, and a consumer whose client dials the
// broker through a proxy that Cut drops.
type kafka struct{ brokers []string }

// recordOverhead is what a record alone in its batch costs beyond its
// value and headers, as a franz-go client counts it before it has learnt
// which produce version the broker speaks (the largest of its encodings,
// as for the first record a client produces): the batch's header, the
// record's lengths, attributes and deltas. 76 bytes, which
// TestMaxBodyIsTheProducersLimit holds exact.
const recordOverhead = 76

// maxKey is the longest key the harness counts MaxBody for.
const maxKey = 16

// MaxBody is the largest value that franz-go's default producer sends in a
// record with the key header (a key of up to maxKey bytes): its
// kgo.ProducerBatchMaxBytes, 1,000,012 bytes, less the record's overhead
// and the header. TestMaxBodyIsTheProducersLimit holds it to that.
func (kafka) MaxBody() int {
	header := 1 + len(idemkafka.DefaultKeyHeader) + 1 + maxKey
	return 1000012 - recordOverhead - header
}

// MaxHeader is 600 KiB: a record of one header that long fits Kafka's
// default limit.
func (kafka) MaxHeader() int { return 600 << 10 }

// Ordered is true: a record retried holds back the rest of its partition.
func (kafka) Ordered() bool { return true }

func (k kafka) New(t *testing.T, cfg consumertest.Config) error {
	_, err := k.consumer(cfg, "idemtest.unused.dlq")
	return err
}

// consumer returns the consumer cfg describes, with dlq as its
// dead-letter topic (PoisonDeadLetter, PoisonRefused).
func (kafka) consumer(cfg consumertest.Config, dlq string) (*idemkafka.Consumer, error) {
	opts := []idemkafka.Option{
		idemkafka.WithRetryBackoff(cfg.RetryFirst, cfg.RetryLongest),
		idemkafka.WithBusyDelay(cfg.BusyDelay),
		idemkafka.WithDrainTimeout(cfg.DrainTimeout),
		idemkafka.WithCommitInterval(100 * time.Millisecond),
		// One at a time: the handler of a record runs once the records
		// before it are settled, as the suite's cases expect.
		idemkafka.WithMaxBatch(1),
	}
	switch cfg.Scope {
	case consumertest.ScopeShared:
		opts = append(opts, idemkafka.WithSharedScope())
	case consumertest.ScopeHeader:
		opts = append(opts, idemkafka.WithScope(func(r *kgo.Record) string {
			userFunc(cfg, "scope", r)
			v, _ := header(r, "tenant")
			return v
		}))
	}
	if cfg.UserFunc != nil {
		opts = append(opts,
			idemkafka.WithKeyFunc(func(r *kgo.Record) (string, error) {
				userFunc(cfg, "key", r)
				v, _ := header(r, idemkafka.DefaultKeyHeader)
				return v, nil
			}),
			idemkafka.WithFingerprint(func(r *kgo.Record) []byte {
				userFunc(cfg, "fingerprint", r)
				return r.Value
			}),
			idemkafka.WithObserver(func(context.Context, idemkafka.Event) { cfg.UserFunc("observer", consumertest.Received{}) }))
	}
	switch cfg.Poison {
	case consumertest.PoisonDeadLetter, consumertest.PoisonRefused:
		opts = append(opts, idemkafka.WithDeadLetter(dlq))
	case consumertest.PoisonDiscard:
		opts = append(opts, idemkafka.WithDiscardPoison())
	}
	if cfg.MaxAttempts > 0 {
		opts = append(opts, idemkafka.WithMaxAttempts(cfg.MaxAttempts))
	}
	if cfg.UnkeyedUnguarded {
		opts = append(opts, idemkafka.WithUnkeyedUnguarded())
	}
	return idemkafka.New(cfg.Guard, func(ctx context.Context, r *kgo.Record) error {
		return cfg.Handler(ctx, received(r))
	}, opts...)
}

// userFunc calls cfg's UserFunc, if any, as the function fn of r.
func userFunc(cfg consumertest.Config, fn string, r *kgo.Record) {
	if cfg.UserFunc != nil {
		cfg.UserFunc(fn, received(r))
	}
}

func received(r *kgo.Record) consumertest.Received {
	m := consumertest.Received{Body: r.Value, Headers: map[string]string{}}
	for _, h := range r.Headers {
		m.Headers[h.Key] = string(h.Value)
	}
	m.Key = m.Headers[idemkafka.DefaultKeyHeader]
	return m
}

func (k kafka) Start(t *testing.T, cfg consumertest.Config) consumertest.Consumer {
	topic := kafkatest.Topic(t, k.brokers, 1)
	dlq := topic + ".dlq"
	switch cfg.Poison {
	case consumertest.PoisonDeadLetter:
		kafkatest.CreateTopics(t, k.brokers, 1, dlq)
	case consumertest.PoisonRefused:
		// The shared broker creates the topics it is asked for
		// (auto.create.topics.enable): a name it forbids is refused.
		dlq = "idemtest refused!" + rand.Text()[:8]
	}
	cons, err := k.consumer(cfg, dlq)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// Kafka clients dial the brokers' advertised addresses, learnt from
	// the metadata: every dial goes through the proxy, the seed's and the
	// broker's alike (one broker).
	p := testenv.StartProxy(t, k.brokers[0])
	var d net.Dialer
	cl, err := kgo.NewClient(append(kafkatest.ClientOpts([]string{p.Addr()}, kafkatest.Group(t), topic),
		append([]kgo.Opt{kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, p.Addr())
		})}, cons.ClientOpts()...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{brokers: k.brokers, producer: producer, proxy: p, client: cl, cancel: cancel, done: make(chan error, 1)}
	if cfg.Poison == consumertest.PoisonDeadLetter {
		h.readDeadLetters(t, dlq)
	}
	go func() { h.done <- cons.Run(ctx, cl) }()
	t.Cleanup(func() { h.Stop(t) })
	return h
}

// harness is a running consumer of the suite.
type harness struct {
	brokers  []string
	producer *kgo.Client
	proxy    *testenv.Proxy
	client   *kgo.Client
	cancel   context.CancelFunc
	done     chan error

	stopOnce sync.Once
	runErr   error

	mu   sync.Mutex
	dead []consumertest.DeadLetter
}

func (h *harness) Publish(t *testing.T, m consumertest.Message) {
	t.Helper()
	r := &kgo.Record{Value: m.Body}
	if !m.NoKey {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: idemkafka.DefaultKeyHeader, Value: []byte(m.Key)})
	}
	for k, v := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkatest.GroupTimeout)
	defer cancel()
	if err := h.producer.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// readDeadLetters reads topic from its start until t ends, for
// DeadLetters.
func (h *harness) readDeadLetters(t *testing.T, topic string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.MetadataMinAge(100*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				dl := consumertest.DeadLetter{Body: r.Value, Headers: map[string]string{}}
				for _, hd := range r.Headers {
					dl.Headers[hd.Key] = string(hd.Value)
				}
				h.mu.Lock()
				h.dead = append(h.dead, dl)
				h.mu.Unlock()
			})
		}
	}()
}

func (h *harness) DeadLetters(*testing.T) []consumertest.DeadLetter {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]consumertest.DeadLetter(nil), h.dead...)
}

func (h *harness) Stop(t *testing.T) error {
	h.stopOnce.Do(func() {
		h.cancel()
		select {
		case h.runErr = <-h.done:
		case <-time.After(kafkatest.GroupTimeout):
			h.runErr = errors.New("Run did not return within a minute of its context's end")
		}
		h.client.Close()
	})
	return h.runErr
}

func (h *harness) Cut(*testing.T) { h.proxy.Drop() }

// MaxBody is the largest value a new producer sends with the key header:
// one byte more is refused as too large.
func TestMaxBodyIsTheProducersLimit(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	produce := func(n int) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.MetadataMinAge(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), kafkatest.GroupTimeout)
		defer cancel()
		r := &kgo.Record{Value: make([]byte, n), Headers: []kgo.RecordHeader{{Key: idemkafka.DefaultKeyHeader, Value: []byte(strings.Repeat("k", maxKey))}}}
		return cl.ProduceSync(ctx, r).FirstErr()
	}
	max := kafka{}.MaxBody()
	if err := produce(max); err != nil {
		t.Fatalf("a record of MaxBody (%d bytes): %v", max, err)
	}
	if err := produce(max + 1); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("a record of MaxBody+1 (%d bytes): %v, want MESSAGE_TOO_LARGE", max+1, err)
	}
}
