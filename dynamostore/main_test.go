package dynamostore_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The tests' server, clients and tables come from package dynamostoretest.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
