package natsstores_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/idemnats"
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
