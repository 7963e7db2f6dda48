package cassandrastore_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/cassandrastore/cassandrastoretest"
)

// The tests' session and keyspace come from package cassandrastoretest;
// the keyspace is dropped and the session closed once every test ran,
// and then no goroutine may be left.
func TestMain(m *testing.M) {
	code := m.Run()
	cassandrastoretest.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
