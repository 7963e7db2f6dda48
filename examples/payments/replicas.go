package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemgo/idem/memstore"
)

// runReplicas runs two replicas of the payment service sharing one store:
// a memstore here, redisstore or pgstore when the replicas are processes.
// start returns replica n's Run and the function that closes its Guard.
// Once both run, meanwhile runs (nil: nothing); then they consume until
// done reports true or ctx ends, and stop.
func runReplicas(ctx context.Context, start func(store *memstore.Store, n int) (run func(context.Context) error, closeGuard func(), err error),
	meanwhile func(ctx context.Context) error, done func() bool) error {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		return err
	}
	defer store.Close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for replica := range 2 {
		run, closeGuard, err := start(store, replica+1)
		if err != nil {
			return err
		}
		defer closeGuard()
		wg.Go(func() { errs[replica] = run(runCtx) })
	}
	if meanwhile != nil {
		if err := meanwhile(ctx); err != nil {
			return err
		}
	}
	for !done() && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}
