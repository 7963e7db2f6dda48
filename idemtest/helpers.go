package idemtest

import (
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

// MemStore returns a memstore with the default configuration, closed when
// tb ends: the store of tests about what runs on top of one.
func MemStore(tb testing.TB) *memstore.Store {
	tb.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Guard returns a Guard over s with cfg, closed when tb ends; it fails tb
// when idem.New refuses cfg.
func Guard(tb testing.TB, s storage.Store, cfg idem.Config) *idem.Guard {
	tb.Helper()
	g, err := idem.New(s, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Close() })
	return g
}
