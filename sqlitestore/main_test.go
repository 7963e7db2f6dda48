package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/sqlitestore"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild()) // a process of the restart or the several-processes test
	}
	goleak.VerifyTestMain(m)
}

// newStore opens a Store on a new file of the test's own, closed when the
// test ends, and returns it with the file's path.
func newStore(tb testing.TB, cfg sqlitestore.Config) (*sqlitestore.Store, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "idem.db")
	return openStore(tb, path, cfg), path
}

// openStore opens a Store on path, closed when the test ends.
func openStore(tb testing.TB, path string, cfg sqlitestore.Config) *sqlitestore.Store {
	tb.Helper()
	s, err := sqlitestore.Open(testCtx(tb), path, cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}
