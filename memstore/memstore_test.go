package memstore_test

import (
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/memstore"
)

func newStore(t *testing.T, cfg memstore.Config) *memstore.Store {
	t.Helper()
	s, err := memstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	shared := newStore(t, memstore.Config{})
	idemtest.Run(t, func(t *testing.T) idem.Store { return shared })
}
