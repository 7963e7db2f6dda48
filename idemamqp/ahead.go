package idemamqp

import (
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/adapter"
	"github.com/idemgo/idem/internal/ahead"
)

// A delivery's store round trips are off its worker's path: a session's
// claimer takes the deliveries waiting in amqp091's channel (the prefetch
// buffer), claims their keys in one round trip and hands them to the
// workers; a worker runs the handler of a claimed delivery and leaves its
// value to the runner's outcome writer, which stores the values of the
// handlers that ran meanwhile in one round trip and then acks their
// deliveries. The Guard's heartbeat keeps each key's lease from its claim
// to its stored outcome, through the waits for a worker and for the writer.

// maxAhead bounds the deliveries one claim takes: the store's batch, and
// what a claim's round trip waits on.
const maxAhead = 256

// A claim under load waits up to claimLinger after its first delivery for
// more, while the broker may send more (the session holds less than the
// prefetch): RabbitMQ sends a delivery for each ack, so without the wait
// most claims would take one delivery and cost a round trip each, which
// the consumer, RabbitMQ and the store pay in CPU. Under load means the
// delivery came within busyGap of the one before; an idle consumer claims
// a lone delivery at once.
const (
	claimLinger = 300 * time.Microsecond
	busyGap     = time.Millisecond
)

// claimAhead takes the deliveries of s as they come, claims the keys of
// those waiting at once, and hands them to the workers in delivery order.
// It closes s.ready once the delivery channel closed.
func (r *runner) claimAhead(s *session) {
	defer close(s.ready)
	var (
		batch  []job
		ops    []ahead.Op
		claims []ahead.Claim
		at     []int // ops[k] is batch[at[k]]'s
	)
	linger := time.NewTimer(claimLinger)
	linger.Stop()
	var last time.Time // when the delivery before was taken
	for d := range s.deliveries {
		batch = append(batch[:0], r.newJob(s, d))
		if busy := batch[0].start.Sub(last) < busyGap; busy {
			linger.Reset(claimLinger)
		wait:
			for len(batch) < maxAhead && s.held.Load() < int64(r.c.o.prefetch) {
				select {
				case d, ok := <-s.deliveries:
					if !ok {
						break wait
					}
					batch = append(batch, r.newJob(s, d))
				case <-linger.C:
					break wait
				}
			}
			linger.Stop()
		}
	more:
		for len(batch) < maxAhead {
			select {
			case d, ok := <-s.deliveries:
				if !ok {
					break more
				}
				batch = append(batch, r.newJob(s, d))
			default:
				break more
			}
		}
		last = batch[len(batch)-1].start
		ops, at = ops[:0], at[:0]
		for i := range batch {
			if j := &batch[i]; j.keyErr == nil && j.key != "" {
				ops = append(ops, ahead.Op{Scope: j.scope, Key: j.key, Payload: j.payload})
				at = append(at, i)
			}
		}
		if len(ops) > 0 && !r.isStopping() && !s.isDead() {
			claims = append(claims[:0], make([]ahead.Claim, len(ops))...)
			r.c.ahead.Claim(r.hctx, ops, claims)
			for k, i := range at {
				batch[i].cl, batch[i].claimed = claims[k], true
				claims[k] = ahead.Claim{}
			}
		}
		for i := range batch {
			s.ready <- batch[i] // never blocks: s.ready holds the prefetch
			batch[i] = job{}
		}
	}
}

// newJob returns the job of d, with what the claim needs to know of it.
func (r *runner) newJob(s *session, d amqp.Delivery) job {
	o := &r.c.o
	s.held.Add(1)
	j := job{s: s, d: d, start: time.Now()}
	j.key, j.keyErr = o.Key(d)
	j.scope = o.Scope(d)
	if j.keyErr == nil && j.key != "" {
		j.payload = o.Payload(d)
	}
	return j
}

func (r *runner) isStopping() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// giveBack releases the key j's claim holds, if it holds one: its handler
// will not run on this delivery.
func (j *job) giveBack() {
	if j.cl.Held != nil {
		j.cl.Held.Release()
		j.cl.Held = nil
	}
}

// outcomes stores the values of the handlers that ran, behind the workers,
// and settles their deliveries: what a worker leaves to it is stored in
// the next round trip, with whatever the other workers left meanwhile.
type outcomes struct {
	r *runner

	mu    sync.Mutex
	queue []ran // guarded by mu
	spare []ran // the writer's, swapped with queue

	wake     chan struct{}
	quit     chan struct{}
	done     chan struct{}
	settling sync.WaitGroup // settlements that wait (a requeue's backoff, a dead letter's confirm)
}

// ran is a delivery whose handler returned, its value held for the store.
type ran struct {
	dl   delivery
	held ahead.Held
}

func (r *runner) startOutcomes() {
	r.out = &outcomes{r: r, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go r.out.loop()
}

// add leaves dl, whose handler returned held's value, to the writer.
func (o *outcomes) add(dl delivery, held ahead.Held) {
	o.mu.Lock()
	o.queue = append(o.queue, ran{dl, held})
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
	var held []ahead.Held
	var errs []error
	for {
		quit := false
		select {
		case <-o.wake:
		case <-o.quit:
			quit = true
		}
		o.mu.Lock()
		batch := o.queue
		o.queue, o.spare = o.spare[:0], batch
		o.mu.Unlock()
		if len(batch) > 0 {
			held, errs = held[:0], append(errs[:0], make([]error, len(batch))...)
			for _, p := range batch {
				held = append(held, p.held)
			}
			o.r.c.ahead.Complete(held, errs)
			for k := range batch {
				o.settle(batch[k].dl, errs[k])
				batch[k], held[k] = ran{}, nil
			}
		}
		if quit {
			o.settling.Wait()
			return
		}
	}
}

// settle settles dl, whose handler ran and whose outcome the store answered
// with err, as the worker would have after Do: an ack at once, a
// settlement that waits on a goroutine of its own.
func (o *outcomes) settle(dl delivery, err error) {
	r := o.r
	v := r.c.o.Decide(idem.Result{}, err, r.c.tries.Count(dl.id))
	if v.Verdict == adapter.Ack {
		r.finish(dl, v)
		return
	}
	o.settling.Go(func() { r.finish(dl, v) })
}
