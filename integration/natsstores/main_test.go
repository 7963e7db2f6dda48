package natsstores_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild()) // the consumer process of TestKilledConsumer
	}
	goleak.VerifyTestMain(m)
}

// natsServer is the shared NATS server the tests use.
var natsServer = testenv.Server{Name: "NATS", Env: "IDEM_NATS_URL", Default: nats.DefaultURL}

// natsURL is its URL.
var natsURL = natsServer.Addr()

// connect connects to the NATS server at url, closed when tb ends.
func connect(tb testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(3 * time.Second)}, opts...)...)
	if err != nil {
		natsServer.Unreachable(tb, url, err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		natsServer.Unreachable(tb, url+" (JetStream)", err)
	}
	return nc, js
}

// random returns n random bytes in hex.
func random(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newStream creates a stream of the test's own, named IDEMTEST_<random>,
// on the subjects <name>.>, in memory unless cfg says otherwise; deleted
// when tb ends.
func newStream(tb testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	tb.Helper()
	cfg.Name = "IDEMTEST_" + strings.ToUpper(random(6))
	if cfg.Subjects == nil {
		cfg.Subjects = []string{cfg.Name + ".>"}
	}
	if cfg.Storage == jetstream.FileStorage && cfg.MaxAge == 0 {
		cfg.MaxAge = time.Hour // a stream a crashed run leaves behind goes away
	}
	if cfg.Storage != jetstream.FileStorage {
		cfg.Storage = jetstream.MemoryStorage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, cfg)
	// nats-server 2.9 may remove its account's streams directory as the
	// last stream of another test is deleted, under a stream being created
	// ("error creating store for stream", 10049): create it again.
	for try := 0; try < 5 && isAPIError(err, 10049); try++ {
		s, err = js.CreateStream(ctx, cfg)
	}
	if err != nil {
		tb.Fatalf("create stream: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, cfg.Name); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			tb.Logf("delete stream %s: %v", cfg.Name, err)
		}
	})
	return s
}

// isAPIError reports whether err is JetStream's error of code code.
func isAPIError(err error, code jetstream.ErrorCode) bool {
	apiErr, ok := errors.AsType[*jetstream.APIError](err)
	return ok && apiErr.ErrorCode == code
}

// subject returns a subject of the stream.
func subject(s jetstream.Stream, token string) string {
	return s.CachedInfo().Config.Name + "." + token
}

// newConsumer creates a durable pull consumer on s with explicit acks.
func newConsumer(tb testing.TB, s jetstream.Stream, cfg jetstream.ConsumerConfig) jetstream.Consumer {
	tb.Helper()
	if cfg.Durable == "" {
		cfg.Durable = "workers"
	}
	cfg.AckPolicy = jetstream.AckExplicitPolicy
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		tb.Fatalf("create consumer: %v", err)
	}
	return c
}

// publish publishes data to subj with the headers given as name, value
// pairs, and fails tb unless the stream stored it.
func publish(tb testing.TB, js jetstream.JetStream, subj string, data string, headers ...string) *jetstream.PubAck {
	tb.Helper()
	m := &nats.Msg{Subject: subj, Data: []byte(data), Header: nats.Header{}}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Header.Add(headers[i], headers[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		tb.Fatalf("publish to %s: %v", subj, err)
	}
	return ack
}

// newGuard returns a Guard over store, closed when tb ends.
func newGuard(tb testing.TB, store storage.Store, cfg idem.Config) *idem.Guard {
	tb.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = "idemnats-test-" + random(4)
	}
	g, err := idem.New(store, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Close() })
	return g
}

func memStore(tb testing.TB) storage.Store {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// stores are the stores the tests run over, each isolated from every
// other test's (a Redis key prefix, a PostgreSQL schema).
var stores = storesWith(0)

// storeCase is a store the tests or benchmarks run over.
type storeCase struct {
	name string
	new  func(tb testing.TB) storage.Store
}

// storesWith returns the stores, PostgreSQL's over a pool of pgConns
// connections (pgxpool's default when 0).
func storesWith(pgConns int32) []storeCase {
	return []storeCase{
		{"memstore", memStore},
		{"redis", func(tb testing.TB) storage.Store {
			return redisstoretest.Store(tb, redisstoretest.Client(tb), redisstore.Config{})
		}},
		{"postgres", func(tb testing.TB) storage.Store {
			return pgstoretest.Store(tb, pgstoretest.Pool(tb, pgConns), pgstore.Config{})
		}},
	}
}

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
