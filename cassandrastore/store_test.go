package cassandrastore_test

import (
	"testing"

	"github.com/idemgo/idem/cassandrastore"
	"github.com/idemgo/idem/cassandrastore/cassandrastoretest"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/storage"
)

func TestConformance(t *testing.T) {
	s := cassandrastoretest.Store(t, cassandrastore.Config{})
	idemtest.Run(t, func(*testing.T) storage.Store { return s })
}
