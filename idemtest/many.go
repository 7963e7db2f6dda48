package idemtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// GuardManyGoroutines runs Do on n goroutines through a Guard over s, each
// goroutine doing every one of keys keys, starting from a key of its own,
// and fails t unless fn ran once per key and every other call replayed its
// value. It is for stores that promise something of concurrent callers,
// such as [coalesce.New].
func GuardManyGoroutines(t *testing.T, s storage.Store, n, keys int) {
	t.Helper()
	g, err := idem.New(s, idem.Config{Namespace: newEnv(t, s).ns, Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	runs := make([]atomic.Int32, keys)
	var replays atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for j := range keys {
				k := (i*keys/n + j) % keys
				key := fmt.Sprint("key-", k)
				res, err := g.Do(context.Background(), key, []byte("payload"), func(context.Context) ([]byte, error) {
					runs[k].Add(1)
					return []byte("value-" + key), nil
				})
				switch {
				case err != nil:
					t.Errorf("Do %s: %v", key, err)
					return
				case string(res.Value) != "value-"+key:
					t.Errorf("Do %s = %q", key, res.Value)
				case res.Replayed:
					replays.Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range runs {
		if r := runs[k].Load(); r != 1 {
			t.Errorf("key-%d: fn ran %d times, want once", k, r)
		}
	}
	if r := int(replays.Load()); r != (n-1)*keys {
		t.Errorf("%d replays, want %d", r, (n-1)*keys)
	}
}
