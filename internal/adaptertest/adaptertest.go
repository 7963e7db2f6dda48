// Package adaptertest holds what the behaviour suites of the adapters
// (idemhttptest, idemgrpctest and the consumers' suites) share: cases run
// as parallel subtests over any store, each with a Guard of its own.
package adaptertest

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// Case is one behaviour check of a suite, run against a store: a struct
// without a name of its own, so that a suite writes its table of cases as
// {"Name", run} pairs.
type Case = struct {
	Name string
	Run  func(t *testing.T, s storage.Store)
}

// Run runs cases as parallel subtests of t, each against the store
// newStore returns for it.
func Run(t *testing.T, newStore func(t *testing.T) storage.Store, cases []Case) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			c.Run(t, newStore(t))
		})
	}
}

// NewGuard returns a Guard over s with cfg in a namespace of its own (so
// cases may share one store), with a lease of 10s unless cfg sets one, and
// closes it at the end of the test.
func NewGuard(t *testing.T, s storage.Store, cfg idem.Config) *idem.Guard {
	t.Helper()
	cfg.Namespace = "adaptertest-" + rand.Text()
	if cfg.Lease == 0 {
		cfg.Lease = 10 * time.Second
	}
	g, err := idem.New(s, cfg)
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// CheckNoScope checks err, the error of an adapter's constructor called
// without WithScope or WithSharedScope: it must start with pkg, show the
// scope function's signature for requests of type request, and explain
// the threat it guards against.
func CheckNoScope(t *testing.T, err error, pkg, request string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s.New without WithScope or WithSharedScope succeeded: every client would share one key space", pkg)
	}
	for _, want := range []string{pkg + ": ", "WithScope(func(" + request + ") string)", "WithSharedScope()", "stored outcome", "Security Considerations"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's error %q does not say %q", err, want)
		}
	}
}

// CheckConsumerNoScope checks err, the error of a consumer's constructor
// called without WithScope or WithSharedScope, as CheckNoScope does, and
// that it goes on to say, right after, the threat to a consumer, whose
// keys are chosen by its publishers.
func CheckConsumerNoScope(t *testing.T, err error, pkg, request string) {
	t.Helper()
	CheckNoScope(t, err, pkg, request)
	if err != nil && !strings.Contains(err.Error(), "Security Considerations). For a consumer, keys are chosen by publishers") {
		t.Errorf("New's error %q does not say what the threat is to a consumer", err)
	}
}

// LimitStore is a store that keeps values of Max bytes at most and says
// so (storage.Store.MaxValueSize), as redisstore and pgstore do: a longer value or
// cause is refused with an error wrapping idem.ErrValueTooLarge.
type LimitStore struct {
	storage.Store
	Max int
}

// MaxValueSize implements storage.Store.MaxValueSize.
func (s LimitStore) MaxValueSize() int { return s.Max }

// Complete refuses a value longer than Max.
func (s LimitStore) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	if len(value) > s.Max {
		return fmt.Errorf("adaptertest: %w: %d bytes, more than %d", idem.ErrValueTooLarge, len(value), s.Max)
	}
	return s.Store.Complete(ctx, key, t, value, retention)
}

// Fail refuses a cause longer than Max.
func (s LimitStore) Fail(ctx context.Context, key string, t storage.Token, cause []byte, retention time.Duration) error {
	if len(cause) > s.Max {
		return fmt.Errorf("adaptertest: %w: %d bytes, more than %d", idem.ErrValueTooLarge, len(cause), s.Max)
	}
	return s.Store.Fail(ctx, key, t, cause, retention)
}

// Ops records the operations a Guard's Observer sees.
type Ops struct {
	mu  sync.Mutex
	ops []idem.Op
}

// Observe is an idem.Observer.
func (o *Ops) Observe(_ context.Context, e idem.Event) {
	o.mu.Lock()
	o.ops = append(o.ops, e.Op)
	o.mu.Unlock()
}

// Count returns how many times op was seen.
func (o *Ops) Count(op idem.Op) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, x := range o.ops {
		if x == op {
			n++
		}
	}
	return n
}

// Logs is what a logger wrote, safe for concurrent use: what a test reads
// of what an adapter, or the Guard, logged.
type Logs struct {
	mu sync.Mutex
	b  strings.Builder
}

// Logger returns a text logger, of every level, that writes to l.
func (l *Logs) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
