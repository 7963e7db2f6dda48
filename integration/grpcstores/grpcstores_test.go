package grpcstores_test

import (
	"testing"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/idemgrpc/idemgrpctest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every case of the suite has a Guard in a namespace of its own, so the
// cases share one store.

func TestGRPCRedis(t *testing.T) {
	s := redisstoretest.Store(t, redisstoretest.Client(t), redisstore.Config{})
	idemgrpctest.Run(t, func(t *testing.T) storage.Store { return s })
}

func TestGRPCPostgres(t *testing.T) {
	s := pgstoretest.Store(t, pgstoretest.Pool(t, 0), pgstore.Config{})
	idemgrpctest.Run(t, func(t *testing.T) storage.Store { return s })
}

func TestGRPCDynamoDB(t *testing.T) {
	s := dynamostoretest.Store(t, dynamostoretest.Client(t), dynamostore.Config{})
	idemgrpctest.Run(t, func(t *testing.T) storage.Store { return s })
}
