package testenv

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Spread runs op(0) … op(n-1) on exactly goroutines goroutines, each
// taking the next i until none is left. An error of op fails tb (Error)
// and stops that goroutine. Spread returns when every goroutine has.
func Spread(tb testing.TB, n, goroutines int, op func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := op(i); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
