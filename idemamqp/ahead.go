package idemamqp

import (
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/ahead"
	"github.com/idemgo/idem/internal/chassis"
)

// A delivery's store round trips are off its worker's path: a session's
// claimer takes the deliveries waiting in amqp091's channel (the prefetch
// buffer), claims their keys in one round trip and hands them to the
// workers (a few claims under way at once: inFlight); a worker runs the
// handler of a claimed delivery and leaves its value to the runner's
// outcome writer, which stores the values of the handlers that ran
// meanwhile in one round trip and then acks their deliveries. The Guard's heartbeat keeps each key's lease from its claim
// to its stored outcome, through the waits for a worker and for the writer.

// maxAhead bounds the deliveries one claim takes: the store's batch, and
// what a claim's round trip waits on.
const maxAhead = 256

// A claim under load waits after its first delivery for more, while the
// broker may send more (the session holds less than the prefetch), as
// long as the last claim took, up to claimLinger: RabbitMQ sends a
// delivery for each ack, so without the wait most claims would take one
// delivery and cost a round trip each, which the consumer, RabbitMQ and
// the store pay in CPU; a store without round trips (memstore) is not
// waited for. Under load means the delivery came within busyGap of the one
// before; an idle consumer claims a lone delivery at once.
const (
	claimLinger = 300 * time.Microsecond
	busyGap     = time.Millisecond
)

// inFlight bounds the claims under way at once, and the outcome writes.
// One at a time, a store whose batch calls take milliseconds (PostgreSQL's)
// would bound the consumer to a batch per round trip; with a few, the
// deliveries that come meanwhile make the next batch. A write waits up to
// claimLinger for the one under way before it goes beside it, so that a
// fast store (Redis) still takes each batch whole.
const inFlight = 4

// round is one claim: its deliveries, handed to the workers once it is
// answered.
type round struct {
	jobs []job
	done chan struct{} // closed once the claim is answered, or when there is none
}

// claimAhead takes the deliveries of s as they come, claims the keys of
// those waiting at once, and hands them to the workers in delivery order.
// It closes s.ready once the delivery channel closed and every claim was
// handed over.
func (r *runner) claimAhead(s *session) {
	rounds := make(chan *round, inFlight-1) // and one being handed over
	handed := make(chan struct{})
	go func() {
		defer close(handed)
		defer close(s.ready)
		for rd := range rounds {
			<-rd.done
			for _, j := range rd.jobs {
				s.ready <- j // never blocks: s.ready holds the prefetch
			}
		}
	}()
	defer func() {
		close(rounds)
		<-handed
	}()
	linger := time.NewTimer(claimLinger)
	linger.Stop()
	var last time.Time // when the delivery before was taken
	for d := range s.deliveries {
		batch := []job{r.newJob(s, d)}
		if busy := batch[0].start.Sub(last) < busyGap; busy {
			linger.Reset(min(claimLinger, time.Duration(s.claimTook.Load())))
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
		rd := &round{jobs: batch, done: make(chan struct{})}
		r.claim(s, rd)
		rounds <- rd // waits while inFlight claims are under way: deliveries gather meanwhile
	}
}

// claim claims the keys of rd's deliveries that have a usable one, on a
// goroutine of its own, and closes rd.done once it is answered.
func (r *runner) claim(s *session, rd *round) {
	var ops []ahead.Op
	var at []int // ops[k] is rd.jobs[at[k]]'s
	for i := range rd.jobs {
		if j := &rd.jobs[i]; j.keyErr == nil && j.key != "" {
			ops = append(ops, ahead.Op{Scope: j.scope, Key: j.key, Payload: j.payload})
			at = append(at, i)
		}
	}
	if len(ops) == 0 || r.isStopping() || s.isDead() {
		close(rd.done) // the workers take them through DoScoped, or give them up
		return
	}
	go func() {
		defer close(rd.done)
		claims := make([]ahead.Claim, len(ops))
		began := time.Now()
		r.c.ahead.Claim(r.hctx, ops, claims)
		s.claimTook.Store(int64(time.Since(began)))
		for k, i := range at {
			rd.jobs[i].cl, rd.jobs[i].claimed = claims[k], true
		}
	}()
}

// newJob returns the job of d, with what the claim needs to know of it.
func (r *runner) newJob(s *session, d amqp.Delivery) job {
	o := &r.c.o
	s.held.Add(1)
	s.tags.add(d.DeliveryTag)
	j := job{s: s, d: d, start: time.Now()}
	j.scope, j.key, j.payload, j.keyErr = o.Read(d)
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
	writing := make(chan struct{}, inFlight)
	ended := make(chan struct{}, 1) // a write ended
	var writes sync.WaitGroup
	var began time.Time // when the last write began
	wait := time.NewTimer(claimLinger)
	wait.Stop()
	for quit := false; !quit; {
		select {
		case <-o.wake:
		case <-o.quit:
			quit = true
		}
		writing <- struct{}{} // waits while inFlight writes are under way: what the workers leave meanwhile joins the next
		if len(writing) > 1 && !quit {
			// Another write is under way: a fast store ends it before
			// long, and one write then takes all that waits; a slow
			// one gets a write beside it.
			wait.Reset(claimLinger - time.Since(began))
			select {
			case <-ended:
			case <-wait.C:
			case <-o.quit:
				quit = true
			}
			wait.Stop()
		}
		o.mu.Lock()
		batch := o.queue
		o.queue = nil
		o.mu.Unlock()
		if len(batch) == 0 {
			<-writing
			continue
		}
		began = time.Now()
		writes.Go(func() {
			o.write(batch)
			<-writing
			select {
			case ended <- struct{}{}:
			default:
			}
		})
	}
	writes.Wait()
	o.settling.Wait()
}

// write stores the values of batch in one round trip and settles its
// deliveries.
func (o *outcomes) write(batch []ran) {
	held := make([]ahead.Held, len(batch))
	errs := make([]error, len(batch))
	for k, p := range batch {
		held[k] = p.held
	}
	o.r.c.ahead.Complete(held, errs)
	r := o.r
	var acks []delivery // those to ack, grouped by session below
	for k := range batch {
		dl := batch[k].dl
		v := r.c.o.Decide(idem.Result{}, errs[k], r.c.tries.Count(dl.id))
		if v.Settle == chassis.Ack {
			acks = append(acks, dl)
			continue
		}
		// A settlement that waits (a requeue's backoff, a dead letter's
		// confirm), as the worker would have after Do.
		o.settling.Go(func() { r.finish(dl, v) })
	}
	for len(acks) > 0 {
		s := acks[0].s
		var tags []uint64
		for _, dl := range acks {
			if dl.s == s {
				tags = append(tags, dl.d.DeliveryTag)
			}
		}
		ackErrs := make([]error, len(tags))
		s.ackAll(tags, ackErrs)
		k, n := 0, 0
		for _, dl := range acks {
			if dl.s != s {
				acks[k] = dl // another session's, for the next round
				k++
				continue
			}
			r.c.tries.Forget(dl.id)
			r.settled(dl, EventAcked, ackErrs[n])
			n++
		}
		acks = acks[:k]
	}
}
