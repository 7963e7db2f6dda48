package httpstores_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp/idemhttptest"
	"github.com/idemgo/idem/integration/internal/servers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every case of the suite has a Guard in a namespace of its own, so the
// cases share one store.

func TestHTTPRedis(t *testing.T) {
	s := servers.Redis(t)
	idemhttptest.Run(t, func(t *testing.T) idem.Store { return s })
}

func TestHTTPPostgres(t *testing.T) {
	s := servers.Postgres(t)
	idemhttptest.Run(t, func(t *testing.T) idem.Store { return s })
}

func TestHTTPDynamoDB(t *testing.T) {
	s := servers.DynamoDB(t)
	idemhttptest.Run(t, func(t *testing.T) idem.Store { return s })
}
