// Package idemnatstest has the helpers the tests of idemnats, and of code
// built on it, share: a connection to the NATS server the tests use
// (IDEM_NATS_URL, default nats://127.0.0.1:4222, with JetStream), streams
// and consumers of a test's own, deleted when it ends, and publishing.
//
// A server that cannot be reached skips the test, or fails it under
// IDEM_REQUIRE_SERVICES=1, as make test sets.
package idemnatstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/storage"
)

// server is the shared NATS server the tests use.
var server = testenv.Server{Name: "NATS", Env: "IDEM_NATS_URL", Default: nats.DefaultURL}

// URL returns the URL of the NATS server the tests use.
func URL() string { return server.Addr() }

// Connect connects to the NATS server at url, closed when tb ends, and
// checks that it runs JetStream.
func Connect(tb testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(3 * time.Second)}, opts...)...)
	if err != nil {
		server.Unreachable(tb, url, err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		server.Unreachable(tb, url+" (JetStream)", err)
	}
	return nc, js
}

// Random returns n random bytes in hex.
func Random(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// NewStream creates a stream of the test's own, named IDEMTEST_<random>,
// on the subjects <name>.>, in memory unless cfg says otherwise; deleted
// when tb ends.
func NewStream(tb testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	tb.Helper()
	cfg.Name = "IDEMTEST_" + strings.ToUpper(Random(6))
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
	for try := 0; try < 5 && IsAPIError(err, 10049); try++ {
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

// IsAPIError reports whether err is JetStream's error of code code.
func IsAPIError(err error, code jetstream.ErrorCode) bool {
	apiErr, ok := errors.AsType[*jetstream.APIError](err)
	return ok && apiErr.ErrorCode == code
}

// Subject returns the subject <stream>.<token> of stream s.
func Subject(s jetstream.Stream, token string) string {
	return s.CachedInfo().Config.Name + "." + token
}

// NewConsumer creates a durable pull consumer on s with explicit acks,
// named "workers" unless cfg names it.
func NewConsumer(tb testing.TB, s jetstream.Stream, cfg jetstream.ConsumerConfig) jetstream.Consumer {
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

// Publish publishes data to subj with the headers given as name, value
// pairs, and fails tb unless the stream stored it.
func Publish(tb testing.TB, js jetstream.JetStream, subj string, data string, headers ...string) *jetstream.PubAck {
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

// Guard returns a Guard over store, in a namespace of its own unless cfg
// names one, closed when tb ends.
func Guard(tb testing.TB, store storage.Store, cfg idem.Config) *idem.Guard {
	tb.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = "idemnats-test-" + Random(4)
	}
	g, err := idem.New(store, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Close() })
	return g
}

// MemStore returns a memstore, closed when tb ends.
func MemStore(tb testing.TB) storage.Store {
	tb.Helper()
	return idemtest.MemStore(tb)
}

// Run makes a Consumer of cons over g and starts it (see [Start]).
func Run(t testing.TB, g *idem.Guard, cons jetstream.Consumer, h idemnats.Handler, opts ...idemnats.Option) (stop func() error) {
	t.Helper()
	c, err := idemnats.New(g, cons, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return Start(t, c)
}

// Start runs c until tb ends or the returned stop is called; stop waits
// for Run to return and reports its error.
func Start(tb testing.TB, c *idemnats.Consumer) (stop func() error) {
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

// WaitFor polls cond every 10ms until it holds, and fails tb when it does
// not within d; what describes the condition.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	testenv.WaitFor(tb, d, what, cond)
}

// Drained reports whether cons has no message left to deliver nor any
// delivered and not acked (or terminated).
func Drained(tb testing.TB, cons jetstream.Consumer) bool {
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

// TripCounter counts the store round trips a Guard makes over Store in N:
// every call of the store, a batch call counting one.
type TripCounter struct {
	storage.Store
	N atomic.Int64
}

// Claim counts one round trip.
func (s *TripCounter) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	s.N.Add(1)
	return s.Store.Claim(ctx, a)
}

// Complete counts one round trip.
func (s *TripCounter) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	s.N.Add(1)
	return s.Store.Complete(ctx, key, t, value, retention)
}

// Fail counts one round trip.
func (s *TripCounter) Fail(ctx context.Context, key string, t storage.Token, cause []byte, retention time.Duration) error {
	s.N.Add(1)
	return s.Store.Fail(ctx, key, t, cause, retention)
}

// Release counts one round trip.
func (s *TripCounter) Release(ctx context.Context, key string, t storage.Token) error {
	s.N.Add(1)
	return s.Store.Release(ctx, key, t)
}

// Extend counts one round trip.
func (s *TripCounter) Extend(ctx context.Context, key string, t storage.Token, lease time.Duration) error {
	s.N.Add(1)
	return s.Store.Extend(ctx, key, t, lease)
}

// ClaimBatch counts one round trip for the batch.
func (s *TripCounter) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	s.N.Add(1)
	return s.Store.ClaimBatch(ctx, args)
}

// CompleteBatch counts one round trip for the batch.
func (s *TripCounter) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	s.N.Add(1)
	return s.Store.CompleteBatch(ctx, cs)
}
