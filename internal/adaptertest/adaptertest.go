// Package adaptertest holds what the behaviour suites of the adapters
// (idemhttptest, idemgrpctest and the consumers' suites) share: cases run
// as parallel subtests over any store, each with a Guard of its own.
package adaptertest

import (
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// Case is one behaviour check of a suite, run against a store: a struct
// without a name of its own, so that a suite writes its table of cases as
// {"Name", run} pairs.
type Case = struct {
	Name string
	Run  func(t *testing.T, s idem.Store)
}

// Run runs cases as parallel subtests of t, each against the store
// newStore returns for it.
func Run(t *testing.T, newStore func(t *testing.T) idem.Store, cases []Case) {
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
func NewGuard(t *testing.T, s idem.Store, cfg idem.Config) *idem.Guard {
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
