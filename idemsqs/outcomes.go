package idemsqs

import (
	"sync"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/ahead"
	"github.com/idemgo/idem/internal/chassis"
)

// outcomes stores the values of the handlers that ran, behind the workers,
// and settles their messages: what the workers leave to it while a store
// round trip is under way goes in the next one (ahead's Complete, one
// CompleteBatch), and their messages to the settler's next
// DeleteMessageBatch. The keeper keeps each message invisible meanwhile.
type outcomes struct {
	r *runner

	mu    sync.Mutex
	queue []ran // guarded by mu

	wake     chan struct{}
	quit     chan struct{}
	done     chan struct{}
	settling sync.WaitGroup // settlements that wait (a retry's pause, a dead letter)
}

// ran is a message whose handler returned, its value held for the store.
type ran struct {
	j    *job
	held ahead.Held
}

func newOutcomes(r *runner) *outcomes {
	o := &outcomes{r: r, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go o.loop()
	return o
}

// add leaves j, whose handler returned held's value, to the writer.
func (o *outcomes) add(j *job, held ahead.Held) {
	o.mu.Lock()
	o.queue = append(o.queue, ran{j, held})
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// close stores what the writer has been left and waits for the
// settlements; nothing is added after.
func (o *outcomes) close() {
	close(o.quit)
	<-o.done
}

func (o *outcomes) loop() {
	defer close(o.done)
	for quit := false; ; {
		select {
		case <-o.wake:
		case <-o.quit:
			quit = true
		}
		o.mu.Lock()
		batch := o.queue
		o.queue = nil
		o.mu.Unlock()
		if len(batch) > 0 {
			o.write(batch)
		}
		if quit {
			o.settling.Wait()
			return
		}
	}
}

// write stores the values of batch in one round trip and settles their
// messages.
func (o *outcomes) write(batch []ran) {
	r := o.r
	held := make([]ahead.Held, len(batch))
	errs := make([]error, len(batch))
	for k, p := range batch {
		held[k] = p.held
	}
	r.c.ahead.Complete(held, errs)
	for k, p := range batch {
		v := r.c.o.Decide(idem.Result{}, errs[k], r.c.tries.Count(p.j.id))
		if v.Settle == chassis.Ack {
			r.finish(p.j, v) // a delete, queued
			continue
		}
		o.settling.Go(func() { r.finish(p.j, v) })
	}
}
