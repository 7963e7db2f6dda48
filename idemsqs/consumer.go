package idemsqs

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/internal/adapter"
	"github.com/idemgo/idem/internal/ahead"
	"github.com/idemgo/idem/internal/chassis"
	"github.com/idemgo/idem/internal/sqsattr"
)

// Handler handles one message. Return nil to have the message deleted once
// the outcome is stored; an error marked [idem.Permanent] to make it poison
// (see [WithDeadLetter]), with every later duplicate; any other error to
// have it visible again after the retry backoff, until it failed
// WithMaxAttempts times.
//
// ctx carries the lease token ([idem.TokenFrom]) and the W3C trace context
// of the message's attributes (consumer.TraceFrom), and is cancelled when
// the lease is lost, or when Run stops and the drain timeout has passed.
// The consumer keeps the message invisible while the handler runs: the
// handler must not delete it nor change its visibility.
type Handler func(ctx context.Context, m types.Message) error

// API is the part of *sqs.Client the consumer calls.
type API interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

var _ API = (*sqs.Client)(nil)

// Consumer consumes an SQS queue and runs a [Handler] at most once to
// completion per idempotency key, with an [idem.Guard]. Create one with
// [New] and start it with [Consumer.Run].
type Consumer struct {
	g       *idem.Guard
	api     API
	queue   string
	handler Handler
	o       options
	tries   *chassis.Tries // handler failures in a row, by message identity
	ahead   ahead.Claimer  // g's claim and finish apart
	running atomic.Bool
}

// ErrRunning is what [Consumer.Run] returns while another Run of the same
// Consumer has not returned.
var ErrRunning = errors.New("idemsqs: Run: the consumer is already running")

// broker is what the chassis knows of SQS's messages.
var broker = chassis.Broker[types.Message]{
	Names:            adapter.Names{Pkg: "idemsqs", Request: "types.Message", Key: "the " + DefaultKeyHeader + " message attribute"},
	KeyHeader:        DefaultKeyHeader,
	Header:           attrValues,
	Body:             body,
	ValidHeaderName:  sqsattr.ValidName,
	DeadLetterOption: "WithDeadLetter(queueURL), WithRedrivePolicy() (the queue's own dead-letter queue, after maxReceiveCount receives)",
}

// maxTries bounds the identities whose failures a Consumer counts at once:
// far more than the messages a consumer holds or has made visible again.
const maxTries = 1 << 14

// New returns a Consumer of the queue at queueURL, through api (an
// *sqs.Client), that runs h under g. It fails when g, api or h is nil, the
// queue URL is empty, an option is invalid, or a decision is missing: the
// scope ([WithScope] or [WithSharedScope]) and what becomes of poison
// ([WithDeadLetter], [WithRedrivePolicy] or [WithDiscardPoison]). New
// calls no AWS API; [Consumer.Run] reads the queues when it starts.
//
// The Guard's Config.MaxKeyLen and Config.ValidateKey apply to the key
// alone.
func New(g *idem.Guard, api API, queueURL string, h Handler, opts ...Option) (*Consumer, error) {
	switch {
	case g == nil:
		return nil, errors.New("idemsqs: New: Guard is nil")
	case api == nil:
		return nil, errors.New("idemsqs: New: the SQS client is nil")
	case h == nil:
		return nil, errors.New("idemsqs: New: Handler is nil")
	case queueURL == "":
		return nil, errors.New("idemsqs: New: the queue URL is empty")
	}
	c := &Consumer{g: g, api: api, queue: queueURL, handler: h}
	c.o.defaults()
	if err := chassis.Build(&c.o, &c.o.Options, broker, g, idem.Config{}, opts); err != nil {
		return nil, err
	}
	if c.o.redrive && c.o.deadLetter != "" {
		return nil, errors.New("idemsqs: New: WithDeadLetter and WithRedrivePolicy are both given: choose one")
	}
	c.tries = chassis.NewTries(maxTries)
	c.ahead = ahead.For(g)
	return c, nil
}

// Queue returns the URL of the queue the consumer consumes.
func (c *Consumer) Queue() string { return c.queue }

// Run consumes until ctx ends, then stops cleanly and returns nil:
//
//   - It reads the queue's attributes (its visibility timeout, whether it
//     is FIFO, its redrive policy) and the dead-letter queue's, and fails
//     at once when one cannot be read for a reason other than an outage
//     (a queue that does not exist, or may not be read), or when
//     WithRedrivePolicy is given and the queue has none. An outage is
//     tried again, with a backoff, until ctx ends.
//   - It long-polls ReceiveMessage for as many messages as handlers are
//     free (at most 10), claims their keys in one store round trip, and
//     runs their handlers; it keeps each message invisible
//     (ChangeMessageVisibilityBatch, every third of the visibility
//     timeout) while the Guard holds its key, stores the outcomes of the
//     handlers that ran meanwhile in one round trip, and deletes their
//     messages in DeleteMessageBatch calls. A failed receive is tried
//     again with a backoff.
//   - When ctx ends it receives no more, lets running handlers finish
//     for the drain timeout ([WithDrainTimeout]), then cancels their
//     contexts (their keys are released), waits for them to return, and
//     makes every message it holds unsettled visible again. A long poll
//     under way is abandoned: the messages SQS was handing it, if any,
//     come back once the visibility timeout ends.
//
// Handlers run on at most [WithConcurrency] goroutines, none of which
// outlives Run. Run returns ErrRunning if the Consumer is already running.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)

	r := &runner{c: c, stopping: ctx.Done(), slots: make(chan struct{}, c.o.concurrency)}
	if err := r.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	hctx, cancelHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHandlers(nil)
	r.hctx = hctx
	r.keep = newKeeper(r)
	r.settler = newSettler(r)
	r.out = ahead.NewWriter(c.ahead, r.written)
	r.observe(ctx, Event{Kind: EventStarted, Queue: c.queue})
	c.o.Logger().InfoContext(ctx, "idemsqs: consuming", slog.String("queue", c.queue),
		slog.Duration("visibility_timeout", r.vis), slog.Bool("fifo", r.fifo))

	r.receive(ctx)

	r.drain(cancelHandlers)
	r.jobs.Wait()
	r.out.Close() // stores the values of the handlers that ran, and settles their messages
	r.settling.Wait()
	r.settler.close()
	r.keep.close()
	return nil
}

// runner is one Run of a Consumer.
type runner struct {
	c        *Consumer
	hctx     context.Context // the handlers' context: Run's values, cancelled after the drain timeout
	stopping <-chan struct{} // closed when Run's context ends
	slots    chan struct{}   // one per message being handled, at most the concurrency
	jobs     sync.WaitGroup  // the goroutines handling messages

	vis       time.Duration // the visibility timeout messages are received with and kept at
	fifo      bool
	redriven  bool // the queue has a redrive policy
	dlq       string
	dlqFIFO   bool
	dlqMax    int // the dead-letter queue's MaximumMessageSize
	keep      *keeper
	settler   *settler
	out       *ahead.Writer[*job] // stores the values of the handlers that returned, behind them
	settling  sync.WaitGroup      // settlements of stored outcomes that wait (a retry's pause, a dead letter)
	receiving atomic.Int64        // failed receives in a row
}

// job is one received message and what the consumer learnt of it.
type job struct {
	m      types.Message
	start  time.Time
	claim  chassis.Claimed // its scope, key and payload, and the claim's answer
	keyErr error
	id     string // its identity for the count of its handler's failures
	ev     Event

	lease    atomic.Pointer[context.Context] // the running handler's context, while it runs
	done     chan struct{}                   // closed once the message is settled
	returned atomic.Bool                     // settled by making it visible again: it comes back
}

// receive receives messages until ctx ends: as many at a time as handlers
// are free, up to 10.
func (r *runner) receive(ctx context.Context) {
	o := &r.c.o
	for {
		n := r.acquire()
		if n == 0 {
			return
		}
		out, err := r.c.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(r.c.queue),
			MaxNumberOfMessages:         int32(n),
			WaitTimeSeconds:             int32(o.waitTime / time.Second),
			VisibilityTimeout:           seconds(r.vis),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			r.release(n)
			if ctx.Err() != nil {
				return
			}
			failures := int(r.receiving.Add(1))
			pause := o.Backoff(failures)
			r.observe(ctx, Event{Kind: EventReceiveFailed, Queue: r.c.queue, Err: err})
			o.Logger().WarnContext(ctx, "idemsqs: ReceiveMessage failed; trying again", slog.String("queue", r.c.queue),
				slog.Int("failures", failures), slog.Duration("pause", pause), slog.Any("error", err))
			if !r.sleep(pause) {
				return
			}
			continue
		}
		r.receiving.Store(0)
		r.release(n - len(out.Messages))
		if len(out.Messages) > 0 {
			r.dispatch(out.Messages)
		}
	}
}

// acquire takes a free handler slot, waiting for one, and as many more as
// are free at once, up to 10; it returns how many it took, 0 when Run
// stops.
func (r *runner) acquire() int {
	select {
	case r.slots <- struct{}{}:
	case <-r.stopping:
		return 0
	}
	n := 1
	for n < maxReceive {
		select {
		case r.slots <- struct{}{}:
			n++
			continue
		default:
		}
		break
	}
	return n
}

func (r *runner) release(n int) {
	for range n {
		<-r.slots
	}
}

// dispatch claims the keys of a receive's messages in one store round trip
// and hands them to their handlers, each holding one of the slots taken
// for the receive: on a FIFO queue one goroutine per message group runs
// the group's messages in order, elsewhere one goroutine per message.
func (r *runner) dispatch(msgs []types.Message) {
	jobs := make([]*job, len(msgs))
	for i, m := range msgs {
		jobs[i] = r.newJob(m)
	}
	r.keep.add(jobs...)
	r.claim(jobs)
	if !r.fifo {
		for _, j := range jobs {
			r.jobs.Go(func() {
				defer r.release(1)
				r.handle(j)
			})
		}
		return
	}
	var groups [][]*job
	at := map[string]int{}
	for _, j := range jobs {
		g := sysAttr(j.m, types.MessageSystemAttributeNameMessageGroupId)
		i, ok := at[g]
		if !ok {
			i = len(groups)
			at[g] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], j)
	}
	for _, group := range groups {
		r.jobs.Go(func() { r.handleGroup(group) })
	}
}

// handleGroup handles the messages of one FIFO message group of a
// receive, in order: each once the one before is settled. Once one is
// made visible again to be retried, the ones after it are made visible
// again unrun, so that none passes it: SQS delivers none of the group
// while it is invisible, and then the group in order.
func (r *runner) handleGroup(group []*job) {
	for i, j := range group {
		r.handle(j)
		<-j.done
		r.release(1)
		if j.returned.Load() {
			for _, rest := range group[i+1:] {
				r.giveUp(rest, errGroupHeld)
				<-rest.done
				r.release(1)
			}
			return
		}
	}
}

// errGroupHeld is why a FIFO message is made visible again unrun: one
// before it in its group is to be retried.
var errGroupHeld = errors.New("idemsqs: a message before this one in its FIFO group is to be retried")

// errStopping is why a message is made visible again unrun: the consumer
// stops.
var errStopping = errors.New("idemsqs: the consumer stops; the message is visible again")

// newJob returns the job of m, with what the claim needs to know of it.
func (r *runner) newJob(m types.Message) *job {
	o := &r.c.o
	j := &job{m: m, start: time.Now(), done: make(chan struct{})}
	op := &j.claim.Op
	op.Scope, op.Key, op.Payload, j.keyErr = o.Read(m)
	j.id = chassis.Identity(op.Scope, op.Key, aws.ToString(m.MessageId), body(m))
	count, _ := strconv.Atoi(sysAttr(m, types.MessageSystemAttributeNameApproximateReceiveCount))
	j.ev = Event{Queue: r.c.queue, Scope: op.Scope, Key: op.Key, MessageID: aws.ToString(m.MessageId), ReceiveCount: count}
	return j
}

// claim claims the keys of jobs that have a usable one, in one store round
// trip, unless Run stops.
func (r *runner) claim(jobs []*job) {
	var ops []ahead.Op
	var at []*job
	for _, j := range jobs {
		if j.keyErr == nil && j.claim.Op.Key != "" {
			ops = append(ops, j.claim.Op)
			at = append(at, j)
		}
	}
	if len(ops) == 0 || r.isStopping() {
		return
	}
	claims := make([]ahead.Claim, len(ops))
	r.c.ahead.Claim(r.hctx, ops, claims)
	for k, j := range at {
		j.claim.Claim, j.claim.OK = claims[k], true
	}
}

func (r *runner) isStopping() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// giveUp makes j visible again without running it, its claim given back.
func (r *runner) giveUp(j *job, why error) {
	j.claim.GiveBack()
	j.ev.Err = why
	r.changeVisibility(j, 0, EventDelayed)
}

func (r *runner) handle(j *job) {
	o := &r.c.o
	if r.isStopping() {
		r.giveUp(j, errStopping)
		return
	}
	trace := chassis.Trace(func(name string) string { return traceAttr(j.m, name) })
	var v chassis.Verdict
	switch key := j.claim.Op.Key; {
	case j.keyErr != nil, key == "" && !o.UnkeyedUnguarded():
		v = o.DecideKey(j.keyErr)
	case key == "":
		err := r.call(r.hctx, trace, j)
		v = o.Decide(idem.Result{}, err, r.c.tries.Count(j.id))
	default:
		var replayed, pending bool
		if v, replayed, pending = r.guarded(j, trace); pending {
			return // the outcome writer stores its value and settles it
		}
		j.ev.Replayed = replayed
	}
	r.finish(j, v)
}

// guarded runs the handler under the Guard, on the message's claim ahead
// (chassis's RunGuarded), the handler's context kept while it runs so
// that the keeper stops extending the message once the Guard lost the
// key. A handler that returned leaves its value to the outcome writer
// (pending: the message is the writer's to settle).
func (r *runner) guarded(j *job, trace consumer.TraceCarrier) (v chassis.Verdict, replayed, pending bool) {
	run := func(ctx context.Context) error {
		j.lease.Store(&ctx)
		defer j.lease.Store(nil)
		return r.call(ctx, trace, j)
	}
	v, replayed, held := r.c.o.RunGuarded(r.hctx, j.claim, func() int { return r.c.tries.Count(j.id) }, run, r.sleep,
		slog.String("queue", r.c.queue), slog.String("message_id", j.ev.MessageID))
	j.claim.Claim.Held = nil // run or given back by RunGuarded
	if held != nil {
		r.out.Add(j, held)
		return v, false, true
	}
	return v, replayed, false
}

// call runs the handler; a panic is a *consumer.PanicError, logged.
func (r *runner) call(ctx context.Context, trace consumer.TraceCarrier, j *job) error {
	return r.c.o.Call(ctx, nil, trace, func(ctx context.Context) error { return r.c.handler(ctx, j.m) }, func() []slog.Attr {
		return []slog.Attr{slog.String("queue", r.c.queue), slog.String("message_id", j.ev.MessageID)}
	})
}

// finish counts a failed handler's failure and carries out the verdict v
// on j.
func (r *runner) finish(j *job, v chassis.Verdict) {
	if v.Failed {
		r.c.tries.Failed(j.id)
	}
	switch v.Settle {
	case chassis.Ack:
		r.c.tries.Forget(j.id)
		r.delete(j, EventDeleted)
	case chassis.DeadLetter:
		j.ev.Reason, j.ev.Err = v.Reason, v.Cause
		r.poison(j, v)
	default:
		j.ev.Err = v.Cause
		delay := v.Delay
		if v.Busy {
			delay = r.c.o.BusyDelay()
		}
		r.delay(j, delay)
	}
}

// delay makes j visible again after d: SQS's visibility timeout for a
// pause of a second or more (in whole seconds, rounded up); a shorter one
// is waited out here, the message kept invisible, then it is made visible
// at once. When Run stops, at once.
func (r *runner) delay(j *job, d time.Duration) {
	if d < time.Second {
		r.sleep(d)
		d = 0
	}
	if r.isStopping() {
		d = 0
	}
	r.changeVisibility(j, d, EventDelayed)
}

// delete deletes j's message (batched), reporting kind once SQS answered.
func (r *runner) delete(j *job, kind EventKind) {
	r.keep.remove(j)
	r.settler.delete(j, func(err error) { r.settled(j, kind, err) })
}

// changeVisibility makes j's message visible after d (batched), reporting
// kind once SQS answered: it comes back.
func (r *runner) changeVisibility(j *job, d time.Duration, kind EventKind) {
	j.returned.Store(true)
	j.ev.Delay = d
	r.keep.remove(j)
	r.settler.change(j, seconds(d), func(err error) { r.settled(j, kind, err) })
}

// settled reports the settlement of kind, or EventUnsettled when err (SQS's
// answer to the delete or visibility change) says it did not happen, and
// lets the next message of a FIFO group go.
func (r *runner) settled(j *job, kind EventKind, err error) {
	ev := j.ev
	ev.Kind = kind
	if err != nil {
		ev.Kind, ev.Err = EventUnsettled, err
		r.c.o.Logger().Warn("idemsqs: a message was not settled; SQS delivers it again once its visibility timeout ends",
			slog.String("queue", r.c.queue), slog.String("key", ev.Key), slog.String("message_id", ev.MessageID), slog.Any("error", err))
	}
	ev.Duration = time.Since(j.start)
	r.observe(r.hctx, ev)
	close(j.done)
}

// sleep pauses for d; it reports false, at once, when Run stops.
func (r *runner) sleep(d time.Duration) bool {
	if d <= 0 {
		return !r.isStopping()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stopping:
		return false
	}
}

// errDrained cancels the handlers still running when the drain timeout
// passes.
var errDrained = errors.New("idemsqs: the consumer stopped and its drain timeout passed")

// drain waits until no handler runs; past the drain timeout it cancels
// the handlers' contexts and waits for them to return.
func (r *runner) drain(cancel context.CancelCauseFunc) {
	timeout := r.c.o.DrainTimeout()
	chassis.Drain(r.slots, timeout, func() {
		r.c.o.Logger().Warn("idemsqs: drain timeout passed; cancelling the running handlers",
			slog.String("queue", r.c.queue), slog.Duration("timeout", timeout))
		cancel(errDrained)
	})
}

func (r *runner) observe(ctx context.Context, e Event) {
	if r.c.o.observer != nil {
		r.c.o.Observe(ctx, func() { r.c.o.observer(ctx, e) })
	}
}

// seconds returns d in whole seconds, rounded up, within SQS's visibility
// timeouts (0 to 12 hours).
func seconds(d time.Duration) int32 {
	d = min(max(d, 0), maxVisibility)
	return int32((d + time.Second - 1) / time.Second)
}

// callTimeout bounds one settling or extending call to SQS, its retries
// with it.
const callTimeout = 30 * time.Second

// apiContext returns a context for a call that must go through though Run
// stops: Run's values, its own timeout.
func (r *runner) apiContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.hctx), callTimeout)
}
