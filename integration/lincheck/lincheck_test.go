package lincheck_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/integration/lincheck"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
)

func TestMemstoreIsLinearizable(t *testing.T) {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for range 5 {
		lincheck.Check(t, s, lincheck.Options{})
	}
}

func TestRedisIsLinearizable(t *testing.T) {
	t.Parallel()
	s := redisstoretest.Store(t, redisstoretest.Client(t), redisstore.Config{})
	for range 5 {
		lincheck.Check(t, s, lincheck.Options{})
	}
}

func TestPostgresIsLinearizable(t *testing.T) {
	t.Parallel()
	s := pgstoretest.Store(t, pgstoretest.Pool(t, 0), pgstore.Config{})
	for range 5 {
		lincheck.Check(t, s, lincheck.Options{})
	}
}

func TestDynamoDBIsLinearizable(t *testing.T) {
	t.Parallel()
	s := dynamostoretest.Store(t, dynamostoretest.Client(t), dynamostore.Config{})
	for range 5 {
		lincheck.Check(t, s, lincheck.Options{})
	}
}

// unfenced lets any caller finish whatever is in progress: the bug
// fencing tokens exist to prevent.
type unfenced struct{ *memstore.Store }

func (u unfenced) Complete(ctx context.Context, key string, _ idem.Token, v []byte, r time.Duration) error {
	rec, err := u.Get(ctx, key)
	if err != nil {
		return idem.ErrLeaseLost
	}
	return u.Store.Complete(ctx, key, rec.Token, v, r)
}

// failures records a check's verdict instead of failing the test.
type failures struct {
	testing.TB
	msgs []string
}

func (f *failures) Helper() {}
func (f *failures) Fatalf(format string, a ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, a...))
}

func TestCheckCatchesMissingFencing(t *testing.T) {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f := &failures{TB: t}
	for range 10 {
		lincheck.Check(f, unfenced{s}, lincheck.Options{})
	}
	if len(f.msgs) == 0 {
		t.Fatal("ten histories on a store without fencing all passed as linearizable")
	}
	t.Log(f.msgs[0])
}
