package redisstore_test

import (
	"testing"

	"github.com/idemgo/idem/coalesce"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

func TestCoalesceConformance(t *testing.T) {
	s := coalesce.New(newStore(t, sharedClient(t), redisstore.Config{}))
	idemtest.Run(t, func(t *testing.T) storage.Store { return s })
}

// 32 goroutines each do the same 200 keys through a Guard over Coalesce:
// every key's fn runs once, every other call replays its value, and the
// calls share round trips.
func TestCoalesceGuardManyGoroutines(t *testing.T) {
	const n, keys = 32, 200
	h := &counter{}
	idemtest.GuardManyGoroutines(t, coalesce.New(newStore(t, sharedClient(t, h), redisstore.Config{})), n, keys)
	cmds, pipes := h.seen()
	t.Logf("%d Do calls: %d single commands, %d pipelines (%.2f round trips per call)",
		n*keys, len(cmds), len(pipes), float64(len(cmds)+len(pipes))/float64(n*keys))
}
