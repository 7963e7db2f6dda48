package grpcstores_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc/idemgrpctest"
	"github.com/idemgo/idem/integration/internal/servers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every case of the suite has a Guard in a namespace of its own, so the
// cases share one store.

func TestGRPCRedis(t *testing.T) {
	s := servers.Redis(t)
	idemgrpctest.Run(t, func(t *testing.T) idem.Store { return s })
}

func TestGRPCPostgres(t *testing.T) {
	s := servers.Postgres(t)
	idemgrpctest.Run(t, func(t *testing.T) idem.Store { return s })
}

func TestGRPCDynamoDB(t *testing.T) {
	s := servers.DynamoDB(t)
	idemgrpctest.Run(t, func(t *testing.T) idem.Store { return s })
}
