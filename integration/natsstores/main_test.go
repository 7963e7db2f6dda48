package natsstores_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/idemnats/idemnatstest"
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
		{"memstore", idemnatstest.MemStore},
		{"redis", func(tb testing.TB) storage.Store {
			return redisstoretest.Store(tb, redisstoretest.Client(tb), redisstore.Config{})
		}},
		{"postgres", func(tb testing.TB) storage.Store {
			return pgstoretest.Store(tb, pgstoretest.Pool(tb, pgConns), pgstore.Config{})
		}},
	}
}
