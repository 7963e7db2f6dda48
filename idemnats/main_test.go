package idemnats_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/idemnats/idemnatstest"
	"github.com/idemgo/idem/internal/testenv"
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
	run         = idemnatstest.Run
	start       = idemnatstest.Start
	waitFor     = idemnatstest.WaitFor
	drained     = idemnatstest.Drained
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
type events = testenv.Events[idemnats.Event]

// fixture connects to the shared server and makes the test's stream and,
// on it, the durable consumer of cfg.
func fixture(t testing.TB, cfg jetstream.ConsumerConfig) (jetstream.JetStream, jetstream.Stream, jetstream.Consumer) {
	t.Helper()
	_, js := connect(t, natsURL)
	s := newStream(t, js, jetstream.StreamConfig{})
	return js, s, newConsumer(t, s, cfg)
}

// counter is a concurrency-safe count.
type counter struct{ atomic.Int64 }
