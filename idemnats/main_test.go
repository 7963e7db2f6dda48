package idemnats_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/idemnats/idemnatstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The shared helpers, under the names the tests use.
var (
	natsURL     = idemnatstest.URL()
	connect     = idemnatstest.Connect
	random      = idemnatstest.Random
	newStream   = idemnatstest.NewStream
	isAPIError  = idemnatstest.IsAPIError
	subject     = idemnatstest.Subject
	newConsumer = idemnatstest.NewConsumer
	publish     = idemnatstest.Publish
	newGuard    = idemnatstest.Guard
	memStore    = idemnatstest.MemStore
)

// effects counts the side effects of the handlers, per key.
type effects struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *effects) add(key string) {
	e.mu.Lock()
	if e.n == nil {
		e.n = make(map[string]int)
	}
	e.n[key]++
	e.mu.Unlock()
}

func (e *effects) get(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[key]
}

func (e *effects) keys() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.n)
}

// events records what an observer saw.
type events struct {
	mu  sync.Mutex
	all []idemnats.Event
}

func (e *events) observe(_ context.Context, ev idemnats.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) count(f func(idemnats.Event) bool) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if f(ev) {
			n++
		}
	}
	return n
}

// fixture connects to the shared server and makes the test's stream and,
// on it, the durable consumer of cfg.
func fixture(t testing.TB, cfg jetstream.ConsumerConfig) (jetstream.JetStream, jetstream.Stream, jetstream.Consumer) {
	t.Helper()
	_, js := connect(t, natsURL)
	s := newStream(t, js, jetstream.StreamConfig{})
	return js, s, newConsumer(t, s, cfg)
}

// run makes a Consumer of cons over g and starts it (see start).
func run(t testing.TB, g *idem.Guard, cons jetstream.Consumer, h idemnats.Handler, opts ...idemnats.Option) (stop func() error) {
	t.Helper()
	c, err := idemnats.New(g, cons, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, c)
}

// start runs c until tb ends or the returned stop is called; stop waits
// for Run to return and reports its error.
func start(tb testing.TB, c *idemnats.Consumer) (stop func() error) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("Run did not return within 30s of its context's end")
			}
		})
		return err
	}
	tb.Cleanup(func() {
		if err := stop(); err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	return stop
}

// waitFor polls cond every 10ms until it holds, and fails tb when it does
// not within d; what describes the condition.
func waitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// drained reports whether cons has no message left to deliver nor any
// delivered and not acked (or terminated).
func drained(tb testing.TB, cons jetstream.Consumer) bool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := cons.Info(ctx)
	if err != nil {
		tb.Logf("consumer info: %v", err)
		return false
	}
	return info.NumPending == 0 && info.NumAckPending == 0
}

// counter is a concurrency-safe count.
type counter struct{ atomic.Int64 }
