package idemkafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemkafka/internal/kafkatest"
	"github.com/idemgo/idem/idemtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const groupTimeout = kafkatest.GroupTimeout

// cluster is the tests' Apache Kafka, topics and groups of a test's own.
type cluster = kafkatest.Cluster

// newCluster returns the tests' broker with the topics given (name →
// partitions) created under c.Name for t.
func newCluster(t testing.TB, topics map[string]int32) *cluster {
	t.Helper()
	return kafkatest.NewCluster(t, topics)
}

// produce publishes recs on the partitions they name.
func produce(t testing.TB, c *cluster, recs ...*kgo.Record) {
	t.Helper()
	kafkatest.Produce(t, c.ListenAddrs(), recs...)
}

var (
	keyed     = kafkatest.Keyed
	headerKey = kafkatest.HeaderKey
	await     = kafkatest.Await
)

func clientOpts(c *cluster, group string, topics ...string) []kgo.Opt {
	return kafkatest.ClientOpts(c.ListenAddrs(), group, topics...)
}

var (
	newMem   = idemtest.MemStore
	newGuard = idemtest.Guard
)

// member is one running consumer of a group.
type member struct {
	t      testing.TB
	c      *idemkafka.Consumer
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan error
}

// start creates a consumer of g with h and the options, its client, and
// runs it until stop (or t's end).
func start(t testing.TB, c *cluster, group, topic string, g *idem.Guard, h idemkafka.Handler, opts ...idemkafka.Option) *member {
	t.Helper()
	cons, err := idemkafka.New(g, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(clientOpts(c, group, topic), cons.ClientOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{t: t, c: cons, cl: cl, cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := cons.Run(ctx, cl)
		if err != nil {
			t.Logf("Run: %v", err)
		}
		m.done <- err
	}()
	t.Cleanup(func() { m.stop() })
	return m
}

// stop shuts the member down gracefully and closes its client; it returns
// Run's error. Later calls return nil.
func (m *member) stop() error {
	if m.cancel == nil {
		return nil
	}
	m.cancel()
	m.cancel = nil
	var err error
	select {
	case err = <-m.done:
	case <-time.After(groupTimeout):
		err = fmt.Errorf("Run did not return within %v of its context's end", groupTimeout)
	}
	m.cl.Close()
	return err
}

// ledger counts the effects of handlers by key, and catches two runs of a
// key at once.
type ledger struct {
	mu       sync.Mutex
	effects  map[string]int
	inFlight map[string]bool
	overlaps []string
	changed  chan struct{}
}

func newLedger() *ledger {
	return &ledger{effects: map[string]int{}, inFlight: map[string]bool{}, changed: make(chan struct{}, 1)}
}

// enter marks key as being handled, noting an overlap if it already is.
func (l *ledger) enter(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight[key] {
		l.overlaps = append(l.overlaps, key)
	}
	l.inFlight[key] = true
}

func (l *ledger) leave(key string, effect bool) {
	l.mu.Lock()
	delete(l.inFlight, key)
	if effect {
		l.effects[key]++
	}
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// handler records one effect per run, keyed by the record's idempotency key.
func (l *ledger) handler(ctx context.Context, r *kgo.Record) error {
	k := headerKey(r)
	l.enter(k)
	l.leave(k, true)
	return nil
}

// count returns the keys with at least one effect.
func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.effects)
}

// wantOnce fails unless each of keys had exactly one effect and no key ran
// twice at once.
func (l *ledger) wantOnce(t testing.TB, keys []string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if n := l.effects[k]; n != 1 {
			t.Errorf("key %s: %d effects, want 1", k, n)
		}
	}
	if len(l.effects) != len(keys) {
		t.Errorf("%d keys had effects, want %d", len(l.effects), len(keys))
	}
	if len(l.overlaps) > 0 {
		t.Errorf("keys handled twice at once: %v", l.overlaps)
	}
}
