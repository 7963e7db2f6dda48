package httpstores_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp/idemhttptest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every case of the suite has a Guard in a namespace of its own, so the
// cases share one store.

func TestHTTPRedis(t *testing.T) {
	s := redisstoretest.Store(t, redisstoretest.Client(t), redisstore.Config{})
	idemhttptest.Run(t, func(t *testing.T) idem.Store { return s })
}

func TestHTTPPostgres(t *testing.T) {
	s := pgstoretest.Store(t, pgstoretest.Pool(t, 0), pgstore.Config{})
	idemhttptest.Run(t, func(t *testing.T) idem.Store { return s })
}
