package sqlitestore_test

import (
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/sqlitestore"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, sqlitestore.Config{})
	idemtest.Run(t, func(t *testing.T) idem.Store { return s })
}
