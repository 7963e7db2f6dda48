package sqlitestore_test

import (
	"testing"

	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/sqlitestore"
	"github.com/idemgo/idem/storage"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, sqlitestore.Config{})
	idemtest.Run(t, func(t *testing.T) storage.Store { return s })
}
