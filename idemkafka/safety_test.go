package idemkafka_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemkafka/internal/kafkatest"
	"github.com/idemgo/idem/storage"
)

// events collects a consumer's events.
type events struct {
	mu  sync.Mutex
	all []idemkafka.Event
}

func (e *events) option() idemkafka.Option {
	return idemkafka.WithObserver(func(_ context.Context, ev idemkafka.Event) {
		e.mu.Lock()
		e.all = append(e.all, ev)
		e.mu.Unlock()
	})
}

// of returns the events of kind.
func (e *events) of(kind idemkafka.EventKind) []idemkafka.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []idemkafka.Event
	for _, ev := range e.all {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// logCount counts the log records whose message contains a text.
type logCount struct {
	mu     sync.Mutex
	counts map[string]int
}

func (l *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCount) WithGroup(string) slog.Handler            { return l }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	l.counts[r.Message]++
	return nil
}

// count returns how many records' messages contain text.
func (l *logCount) count(text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for msg, c := range l.counts {
		if strings.Contains(msg, text) {
			n += c
		}
	}
	return n
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// A dead letter fits the producing client's kgo.ProducerBatchMaxBytes,
// read from the client: a value the broker takes is left out of the dead
// letter of a client with a smaller limit. And when the dead-letter topic
// takes less than the client produces (its max.message.bytes), the broker's
// refusal strips the dead letter, which then arrives.
func TestDeadLetterFitsTheLimits(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	for _, tc := range []struct {
		name   string
		client []kgo.Opt         // the dead-letter client's options
		topic  map[string]string // the dead-letter topic's configuration
		// kept: the dead letter keeps the record's own headers (fitted
		// to the client's limit, only the value and key had to go), or
		// not (stripped after the broker's refusal).
		kept bool
	}{
		{"the client's limit", []kgo.Opt{kgo.ProducerBatchMaxBytes(64 << 10)}, nil, true},
		{"the topic's limit", nil, map[string]string{"max.message.bytes": strconv.Itoa(32 << 10)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, map[string]int32{"orders": 1})
			topic := c.Name("orders")
			dlq := kafkatest.TopicWithConfig(t, brokers, 1, tc.topic)
			dl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(100 * time.Millisecond)}, tc.client...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(dl.Close)
			// Random bytes: compression does not make them fit.
			value, recordKey := randomBytes(100<<10), []byte("order-7")
			poison := keyed(topic, 0, "poison", "")
			poison.Value, poison.Key = value, recordKey
			kafkatest.Produce(t, brokers, poison, keyed(topic, 0, "after", "v"))
			var ev events
			l := newLedger()
			start(t, c, c.Name("g"), topic, newGuard(t, newMem(t), idem.Config{}), poisonOr(l), idemkafka.WithSharedScope(), idemkafka.WithDeadLetter(dlq), idemkafka.WithDeadLetterClient(dl), idemkafka.WithMaxBatch(1), ev.option())
			got := readAll(t, c, dlq, 1)[0]
			await(t, groupTimeout, "the record after the poison to be handled", func() bool { return l.count() == 1 })
			if len(got.Value) != 0 || len(got.Key) != 0 {
				t.Fatalf("the dead letter has a value of %d bytes and a key of %d: they were to be left out", len(got.Value), len(got.Key))
			}
			for name, want := range map[string]string{
				consumer.HeaderReason:          string(consumer.ReasonPermanent),
				consumer.HeaderKey:             "poison",
				consumer.HeaderBodySize:        strconv.Itoa(len(value)),
				consumer.HeaderBodySHA256:      sha(value),
				consumer.HeaderRecordKeySize:   strconv.Itoa(len(recordKey)),
				consumer.HeaderRecordKeySHA256: sha(recordKey),
				idemkafka.HeaderOffset:         "0",
			} {
				if v, _ := header(got, name); v != want {
					t.Errorf("the dead letter's %s = %q, want %q", name, v, want)
				}
			}
			if v, ok := header(got, idemkafka.DefaultKeyHeader); ok != tc.kept || tc.kept && v != "poison" {
				t.Errorf("the dead letter's own %s header: %q (present %v), want it kept: %v", idemkafka.DefaultKeyHeader, v, ok, tc.kept)
			}
			if cut, _ := header(got, consumer.HeaderCutHeaders); (cut == idemkafka.DefaultKeyHeader) == tc.kept {
				t.Errorf("the dead letter's %s = %q, want the record's headers listed: %v", consumer.HeaderCutHeaders, cut, !tc.kept)
			}
			if n := len(ev.of(idemkafka.EventDeadLettered)); n != 1 {
				t.Fatalf("%d EventDeadLettered, want 1", n)
			}
		})
	}
}

// poisonOr is a handler that fails the record keyed "poison" permanently,
// and records the others in l.
func poisonOr(l *ledger) idemkafka.Handler {
	return func(ctx context.Context, r *kgo.Record) error {
		if headerKey(r) == "poison" {
			return idem.Permanent(errors.New("not an order"))
		}
		return l.handler(ctx, r)
	}
}

// A dead-letter topic deleted while the consumer runs: each refusal
// (UNKNOWN_TOPIC_OR_PARTITION once franz-go stopped waiting for the topic)
// is reported (EventDeadLetterFailed, Refused) and logged at error level;
// after MaxAttempts the dead letter is given up on: an error log,
// EventDiscarded with the broker's refusal, and the partition goes on.
func TestRefusedDeadLetterIsGivenUp(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	brokers, topic, dlq := c.ListenAddrs(), c.Name("orders"), c.Name("orders.dlq")
	var ev events
	logs := &logCount{}
	l := newLedger()
	start(t, c, c.Name("g"), topic, newGuard(t, newMem(t), idem.Config{}), poisonOr(l), idemkafka.WithSharedScope(), idemkafka.WithDeadLetter(dlq), idemkafka.WithMaxAttempts(3), idemkafka.WithMaxBatch(1),
		idemkafka.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond), idemkafka.WithLogger(slog.New(logs)), ev.option())
	kafkatest.Produce(t, brokers, keyed(topic, 0, "first", "v"))
	await(t, groupTimeout, "the first record to be handled", func() bool { return l.count() == 1 })
	kafkatest.DeleteTopics(t, brokers, dlq)
	kafkatest.Produce(t, brokers, keyed(topic, 0, "poison", "v"), keyed(topic, 0, "after", "v"))
	await(t, 2*groupTimeout, "the record after the poison to be handled", func() bool { return l.count() == 2 })
	discarded := ev.of(idemkafka.EventDiscarded)
	if len(discarded) != 1 {
		t.Fatalf("%d EventDiscarded, want 1", len(discarded))
	}
	d := discarded[0]
	if !errors.Is(d.BrokerErr, kerr.UnknownTopicOrPartition) || d.Reason != consumer.ReasonPermanent || d.Offset != 1 || d.Key != "poison" {
		t.Fatalf("EventDiscarded %+v, want the poison's, with the broker's UNKNOWN_TOPIC_OR_PARTITION", d)
	}
	failed := ev.of(idemkafka.EventDeadLetterFailed)
	if len(failed) != 3 {
		t.Fatalf("%d EventDeadLetterFailed, want one per refusal, 3", len(failed))
	}
	for _, f := range failed {
		if a := f.Activity(); !f.Refused || f.Key != "poison" || !errors.Is(f.BrokerErr, kerr.UnknownTopicOrPartition) ||
			a.Kind != consumer.ActivityDeadLetterFailed || !a.Refused {
			t.Fatalf("EventDeadLetterFailed %+v (activity %+v), want the poison's, refused", f, a)
		}
	}
	if n := logs.count("refused the dead letter; trying again"); n != 2 {
		t.Fatalf("the dead letter was refused and tried again %d times, want 2 (3 tries)", n)
	}
	if n := logs.count("the broker refused the dead letter 3 times"); n != 1 {
		t.Fatalf("%d error logs of the dead letter given up, want 1", n)
	}
}

// A dead-letter topic that does not exist, or that Kafka refuses to know
// (an invalid name), is found before anything is consumed: Run returns a
// *consumer.DeadLetterMissingError that names it, and no record is
// handled. Asking does not create it: franz-go's clients do not ask
// Kafka to create topics unless told to (kgo.AllowAutoTopicCreation), so
// the shared broker's auto.create.topics.enable does not apply.
func TestDeadLetterMissingAtStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want error
	}{
		{"missing", kerr.UnknownTopicOrPartition},
		{"invalid name!", kerr.InvalidTopicException},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, map[string]int32{"orders": 1})
			brokers, topic, dlq := c.ListenAddrs(), c.Name("orders"), c.Name(tc.name)
			kafkatest.Produce(t, brokers, keyed(topic, 0, "poison", "v"))
			l := newLedger()
			m := start(t, c, c.Name("g"), topic, newGuard(t, newMem(t), idem.Config{}), poisonOr(l), idemkafka.WithSharedScope(), idemkafka.WithDeadLetter(dlq))
			var err error
			select {
			case err = <-m.done:
				m.done <- err
			case <-time.After(groupTimeout):
				t.Fatal("Run did not return")
			}
			missing, ok := errors.AsType[*consumer.DeadLetterMissingError](err)
			if !ok || !errors.Is(err, tc.want) || !strings.Contains(missing.Destination, dlq) {
				t.Fatalf("Run = %v, want a *consumer.DeadLetterMissingError naming %s, with %v", err, dlq, tc.want)
			}
			if l.count() != 0 {
				t.Fatal("a record was handled")
			}
			req := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(dlq)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(context.Background(), kafkatest.AdminClient(t, brokers))
			if err != nil {
				t.Fatal(err)
			}
			if code := resp.Topics[0].ErrorCode; code == 0 {
				t.Fatal("the check created the dead-letter topic")
			}
		})
	}
}

// A dead-letter topic that cannot be reached is an outage, however long it
// lasts: the poison waits, its partition with it, and nothing is given up
// or counted; once the broker is back, the dead letter arrives and the
// partition goes on.
func TestUnreachableDeadLetterWaits(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 1})
	brokers, topic := c.ListenAddrs(), c.Name("orders")
	dlq := kafkatest.Topic(t, brokers, 1)
	var down atomic.Bool
	down.Store(true)
	var d net.Dialer
	dl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(100*time.Millisecond),
		kgo.RecordDeliveryTimeout(time.Second), // a try gives up quickly: retried by the consumer
		kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			if down.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			return d.DialContext(ctx, network, host)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dl.Close)
	kafkatest.Produce(t, brokers, keyed(topic, 0, "poison", "v"), keyed(topic, 0, "after", "v"))
	var ev events
	logs := &logCount{}
	l := newLedger()
	start(t, c, c.Name("g"), topic, newGuard(t, newMem(t), idem.Config{}), poisonOr(l), idemkafka.WithSharedScope(), idemkafka.WithDeadLetter(dlq), idemkafka.WithDeadLetterClient(dl), idemkafka.WithMaxAttempts(2), idemkafka.WithMaxBatch(1),
		idemkafka.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond), idemkafka.WithLogger(slog.New(logs)), ev.option())
	poisonEvents := func() int { return len(ev.of(idemkafka.EventDiscarded)) + len(ev.of(idemkafka.EventDeadLettered)) }
	await(t, groupTimeout, "tries at the dead letter past MaxAttempts", func() bool {
		return logs.count("did not reach the broker") >= 4 || poisonEvents() > 0
	})
	if n := poisonEvents(); n != 0 {
		t.Fatalf("%d poison events while the dead-letter topic cannot be reached, want 0", n)
	}
	if l.count() != 0 {
		t.Fatal("the record after the poison was handled before the poison was dead-lettered")
	}
	down.Store(false)
	got := readAll(t, c, dlq, 1)[0]
	await(t, groupTimeout, "the record after the poison to be handled", func() bool { return l.count() == 1 })
	if v, _ := header(got, consumer.HeaderKey); v != "poison" {
		t.Fatalf("the dead letter's key header is %q, want poison", v)
	}
	if n := len(ev.of(idemkafka.EventDeadLettered)); n != 1 {
		t.Fatalf("%d EventDeadLettered, want 1", n)
	}
}

type spanKey struct{}

// The handler's context carries the values of the record's own context,
// where a kgo hook such as kotel puts the consumer span, and its
// cancellation is the consumer's alone: a record whose context is
// cancelled does not cancel its handler.
func TestHandlerContextCarriesTheRecordsContext(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 1})
	brokers, topic := c.ListenAddrs(), c.Name("orders")
	kafkatest.Produce(t, brokers, keyed(topic, 0, "k", "v"))
	type seen struct {
		span   any
		err    error
		leased bool
	}
	got := make(chan seen, 1)
	cons, err := idemkafka.New(newGuard(t, newMem(t), idem.Config{}), func(ctx context.Context, r *kgo.Record) error {
		_, leased := idem.TokenFrom(ctx)
		got <- seen{ctx.Value(spanKey{}), ctx.Err(), leased}
		return nil
	}, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(append(kafkatest.ClientOpts(brokers, kafkatest.Group(t), topic), kgo.WithHooks(spanHook{})), cons.ClientOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx, cl) }()
	defer func() { cancel(); <-done }()
	select {
	case s := <-got:
		if s.span != "consumer span" || s.err != nil || !s.leased {
			t.Fatalf("the handler's context: span %v, Err %v, lease token %v; want the record context's span, not cancelled, leased", s.span, s.err, s.leased)
		}
	case <-time.After(groupTimeout):
		t.Fatal("the record was not handled")
	}
}

// spanHook puts a value in each fetched record's context, as kotel puts
// its span, in a context that is already cancelled.
type spanHook struct{}

func (spanHook) OnFetchRecordBuffered(r *kgo.Record) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Context = context.WithValue(ctx, spanKey{}, "consumer span")
}

// A store that cannot be reached is an outage, not an attempt: a record
// whose claims fail for longer than MaxAttempts tries is handled once the
// store is back, not dead-lettered.
func TestStoreOutageIsNoAttempt(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 1})
	brokers, topic := c.ListenAddrs(), c.Name("orders")
	kafkatest.Produce(t, brokers, keyed(topic, 0, "k", "v"))
	s := &downStore{Store: newMem(t)}
	s.down.Store(true)
	var ev events
	l := newLedger()
	start(t, c, c.Name("g"), topic, newGuard(t, s, idem.Config{}), l.handler,
		idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithMaxAttempts(2),
		idemkafka.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond), ev.option())
	await(t, groupTimeout, "retries past MaxAttempts", func() bool {
		return len(ev.of(idemkafka.EventRetry)) >= 5 || len(ev.of(idemkafka.EventDiscarded)) > 0
	})
	if n := len(ev.of(idemkafka.EventDiscarded)); n != 0 {
		t.Fatalf("a record whose store was down was discarded as poison (%d events)", n)
	}
	s.down.Store(false)
	await(t, groupTimeout, "the record to be handled", func() bool { return l.count() == 1 })
	if n := len(ev.of(idemkafka.EventDiscarded)); n != 0 {
		t.Fatalf("a record whose store was down was discarded as poison (%d events)", n)
	}
}

// downStore is a store whose claims fail while down.
type downStore struct {
	storage.Store
	down atomic.Bool
}

// ClaimBatch goes through Claim, so that a batch fails as its claims do.
func (s *downStore) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	return storage.ClaimEach(ctx, s, args)
}

func (s *downStore) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if s.down.Load() {
		return storage.Claim{}, errors.New("connection refused")
	}
	return s.Store.Claim(ctx, a)
}

// Each kind's name is its own: the kinds the consumer reports and those
// the package documents are one list.
func TestEventKindNames(t *testing.T) {
	for kind, want := range map[idemkafka.EventKind]string{
		idemkafka.EventAssigned: "assigned", idemkafka.EventRevoked: "revoked", idemkafka.EventLost: "lost",
		idemkafka.EventBatch: "batch", idemkafka.EventRetry: "retry", idemkafka.EventDeadLettered: "dead_lettered",
		idemkafka.EventDiscarded: "discarded", idemkafka.EventCommit: "commit",
	} {
		if got := kind.String(); got != want {
			t.Errorf("EventKind %d is %q, want %q", kind, got, want)
		}
	}
}
