package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/chassis"
)

// Processor handles the records of one partition.
type Processor interface {
	// Process handles items, records of one partition in offset order, and
	// returns how many of them, from the first, are done (acknowledged,
	// dead-lettered or discarded, and, where the processor stores offsets
	// itself, stored with their offset). When done < len(items), v is the
	// verdict on items[done], a Retry (the Guard's, the chassis's, or a
	// chassis.Outage): the consumer counts the failure if v.Failed, waits (the
	// busy delay, or a backoff) and gives it to Process again, alone, then
	// the rest. ctx ends when the partition is revoked or lost, or the
	// consumer's drain deadline passes; Process should start no handler
	// once p.Draining().
	Process(ctx context.Context, p *Partition, items []Item) (done int, v chassis.Verdict)
}

// adjustFunc sets the offsets that newly assigned partitions start from,
// as kgo.AdjustFetchOffsetsFn does, with the consuming client at hand.
type adjustFunc = func(ctx context.Context, cl *kgo.Client, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error)

// Errors the consumer cancels handlers with, and Run's.
var (
	ErrRevoked  = errors.New("idemkafka: the partition was revoked")
	ErrLost     = errors.New("idemkafka: the partition was lost")
	ErrShutdown = errors.New("idemkafka: the consumer is shutting down and the drain deadline passed")
)

// Consumer is the group consumer shared by the adapters; see the package
// documentation.
type Consumer struct {
	o      Options
	proc   Processor
	adjust adjustFunc

	mu      sync.Mutex
	client  *kgo.Client // bound by Run or by the first assignment
	marks   bool        // the client has AutoCommitMarks: mark what is committed
	parts   map[topicPartition]*Partition
	running bool
	workers sync.WaitGroup

	sawAssigned atomic.Bool // the client calls the consumer's callbacks

	// commitMu orders commits with the removal of revoked partitions, so
	// that no commit of a partition already handed on can land after the
	// new owner's.
	commitMu sync.Mutex
}

type topicPartition struct {
	topic     string
	partition int32
}

// New returns the consumer of the adapter pkg ("idemkafka", "kafkapg")
// that handles records with proc, and, when adjust is not nil, lets it set
// where assigned partitions start. It applies opts and checks them (the
// scope and poison decisions among them), over the Guard g, or, when g is
// nil, over an executor whose configuration is cfg.
func New[F ~func(*Options)](pkg string, g *idem.Guard, cfg idem.Config, opts []F, proc Processor, adjust adjustFunc) (*Consumer, error) {
	c := &Consumer{proc: proc, adjust: adjust, parts: make(map[topicPartition]*Partition)}
	if err := build(&c.o, pkg, g, cfg, opts); err != nil {
		return nil, err
	}
	return c, nil
}

// Logger returns the consumer's logger.
func (c *Consumer) Logger() *slog.Logger { return c.o.Logger() }

// ClientOpts returns the options the consuming client must be created
// with: the consumer's rebalance callbacks, BlockRebalanceOnPoll and
// DisableAutoCommit (and AdjustFetchOffsetsFn when the consumer sets the
// starting offsets).
func (c *Consumer) ClientOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		kgo.BlockRebalanceOnPoll(),
		kgo.DisableAutoCommit(),
	}
	if c.adjust != nil {
		opts = append(opts, kgo.AdjustFetchOffsetsFn(c.adjustOffsets))
	}
	return opts
}

// check refuses a client that would lose records or commit too early.
func (c *Consumer) check(cl *kgo.Client) error {
	p := c.o.Names().Pkg
	if cl == nil {
		return fmt.Errorf("%s: Run: the client is nil", p)
	}
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g == "" {
		return fmt.Errorf("%s: Run: the client is not in a consumer group (kgo.ConsumerGroup): offsets are committed per group", p)
	}
	if topics := reflect.ValueOf(cl.OptValue(kgo.ConsumeTopics)); !topics.IsValid() ||
		(topics.Kind() == reflect.Map || topics.Kind() == reflect.Slice) && topics.Len() == 0 {
		return fmt.Errorf("%s: Run: the client consumes no topics (kgo.ConsumeTopics)", p)
	}
	disabled, _ := cl.OptValue(kgo.DisableAutoCommit).(bool)
	marks, _ := cl.OptValue(kgo.AutoCommitMarks).(bool)
	if !disabled && !marks {
		return fmt.Errorf("%s: Run: the client autocommits what it polled, before the outcomes are stored: "+
			"create it with kgo.DisableAutoCommit() (in ClientOpts) or kgo.AutoCommitMarks()", p)
	}
	if block, _ := cl.OptValue(kgo.BlockRebalanceOnPoll).(bool); !block {
		return fmt.Errorf("%s: Run: the client lets a rebalance take partitions while their polled records are handed out: "+
			"create it with kgo.BlockRebalanceOnPoll() (in ClientOpts)", p)
	}
	if c.adjust != nil && !sameFunc(cl.OptValue(kgo.AdjustFetchOffsetsFn), c.adjustOffsets) {
		return fmt.Errorf("%s: Run: the client's AdjustFetchOffsetsFn is not the consumer's: create the client with the consumer's ClientOpts, "+
			"last, so that assigned partitions start at the stored offsets", p)
	}
	return nil
}

// sameFunc reports whether a and b are functions of the same code: a
// consumer's callback, of this consumer or another. (kgo wraps the
// rebalance callbacks: their installation is checked when the first
// records arrive, by Run.)
func sameFunc(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Kind() == reflect.Func && vb.Kind() == reflect.Func && !va.IsNil() && va.Pointer() == vb.Pointer()
}

// Run consumes with cl until ctx ends, then shuts down: it stops fetching,
// lets in-flight handlers finish within the drain timeout (then cancels
// them), commits the finished offsets and leaves the group. It returns
// nil after such a shutdown, an error when cl fails the checks (before
// consuming anything), when cl was closed under it, or when the final
// commit failed.
func (c *Consumer) Run(ctx context.Context, cl *kgo.Client) error {
	if err := c.check(cl); err != nil {
		return err
	}
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return fmt.Errorf("%s: Run: already running", c.o.Names().Pkg)
	}
	if c.client != nil && c.client != cl {
		c.mu.Unlock()
		return fmt.Errorf("%s: Run: the consumer's callbacks were installed on another client", c.o.Names().Pkg)
	}
	c.running, c.client = true, cl
	c.marks, _ = cl.OptValue(kgo.AutoCommitMarks).(bool)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()

	commitCtx, stopCommits := context.WithCancel(context.WithoutCancel(ctx))
	commitsDone := make(chan struct{})
	go func() {
		defer close(commitsDone)
		c.commitLoop(commitCtx)
	}()

	var runErr error
poll:
	for {
		fs := cl.PollRecords(ctx, 0)
		if fs.IsClientClosed() {
			runErr = fmt.Errorf("%s: Run: %w", c.o.Names().Pkg, kgo.ErrClientClosed)
			break
		}
		if ctx.Err() != nil {
			break
		}
		fs.EachError(func(topic string, partition int32, err error) {
			c.o.Logger().WarnContext(ctx, c.o.Names().Pkg+": fetch error", slog.String("topic", topic), slog.Int("partition", int(partition)), slog.Any("error", err))
		})
		if !fs.Empty() && !c.sawAssigned.Load() {
			runErr = fmt.Errorf("%s: Run: records arrived before the consumer's OnPartitionsAssigned ran: create the client with "+
				"the consumer's ClientOpts, last, so that revoked partitions stop their handlers and commit", c.o.Names().Pkg)
			break poll
		}
		fs.EachPartition(func(f kgo.FetchTopicPartition) {
			if len(f.Records) > 0 {
				c.dispatch(ctx, cl, f)
			}
		})
		cl.AllowRebalance()
	}
	cl.AllowRebalance()

	// Shutdown: finish what is in flight, commit it, leave.
	parts := c.removeAll()
	drainErr := c.drain(parts)
	stopCommits()
	<-commitsDone
	if runErr != nil {
		return errors.Join(runErr, drainErr) // the client is closed: nothing to commit with
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.commitTimeout())
	defer cancel()
	commitErr := c.commit(sctx, parts)
	if commitErr != nil {
		commitErr = fmt.Errorf("%s: Run: committing at shutdown: %w", c.o.Names().Pkg, commitErr)
	}
	c.unpause(cl, parts)
	if err := cl.LeaveGroupContext(sctx); err != nil {
		c.o.Logger().WarnContext(ctx, c.o.Names().Pkg+": leaving the group", slog.Any("error", err))
	}
	return errors.Join(drainErr, commitErr)
}

// dispatch hands a partition's fetched records to its worker, starting one
// if the partition has none.
func (c *Consumer) dispatch(ctx context.Context, cl *kgo.Client, f kgo.FetchTopicPartition) {
	k := topicPartition{f.Topic, f.Partition}
	c.mu.Lock()
	p := c.parts[k]
	if p == nil {
		p = newPartition(c, cl, f.Topic, f.Partition)
		c.parts[k] = p
		c.workers.Add(1)
		go p.run()
	}
	c.mu.Unlock()
	p.push(f.Records, f.HighWatermark)
}

// take removes the partitions of tps (all of them when tps is nil) from
// the consumer, under commitMu, so no commit of them is under way after.
func (c *Consumer) take(tps map[string][]int32) []*Partition {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Partition
	for k, p := range c.parts {
		if tps != nil && !contains(tps[k.topic], k.partition) {
			continue
		}
		out = append(out, p)
		delete(c.parts, k)
	}
	return out
}

func (c *Consumer) removeAll() []*Partition { return c.take(nil) }

func contains(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// drain lets the workers of parts finish the handler in flight, up to the
// drain timeout, then cancels them and waits as long again.
func (c *Consumer) drain(parts []*Partition) error {
	for _, p := range parts {
		p.startDrain()
	}
	if waitAll(parts, c.o.DrainTimeout()) {
		return nil
	}
	for _, p := range parts {
		p.stop(ErrShutdown)
	}
	if waitAll(parts, c.o.DrainTimeout()) {
		return nil
	}
	return fmt.Errorf("%s: handlers did not return within %v of their context's end", c.o.Names().Pkg, c.o.DrainTimeout())
}

// waitAll waits for the workers of parts to exit, up to d; it reports
// whether they all did.
func waitAll(parts []*Partition, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, p := range parts {
		select {
		case <-p.done:
		case <-t.C:
			return false
		}
	}
	return true
}

// commitTimeout bounds a commit, and the leave at shutdown: the drain
// timeout, and at least 10 s.
func (c *Consumer) commitTimeout() time.Duration { return max(c.o.DrainTimeout(), 10*time.Second) }

// unpause resumes the fetches of parts paused by their workers: a paused
// partition stays paused across rebalances, and one assigned again later
// would never be fetched.
func (c *Consumer) unpause(cl *kgo.Client, parts []*Partition) {
	tps := map[string][]int32{}
	for _, p := range parts {
		tps[p.Topic] = append(tps[p.Topic], p.Partition)
	}
	if len(tps) > 0 {
		cl.ResumeFetchPartitions(tps)
	}
}

func (c *Consumer) bind(cl *kgo.Client) {
	c.mu.Lock()
	if c.client == nil {
		c.client = cl
	}
	c.mu.Unlock()
}

func (c *Consumer) assigned(ctx context.Context, cl *kgo.Client, tps map[string][]int32) {
	c.bind(cl)
	c.sawAssigned.Store(true)
	for topic, ps := range tps {
		for _, p := range ps {
			c.o.Logger().InfoContext(ctx, c.o.Names().Pkg+": partition assigned", slog.String("topic", topic), slog.Int("partition", int(p)))
			c.observe(ctx, Event{Kind: EventAssigned, Topic: topic, Partition: p})
		}
	}
}

// revoked stops the handlers of the revoked partitions (their context is
// cancelled: each key is released, or stored if its handler finished
// anyway), waits for them, and commits what they finished, before the
// rebalance goes on.
func (c *Consumer) revoked(ctx context.Context, cl *kgo.Client, tps map[string][]int32) {
	c.give(ctx, cl, tps, ErrRevoked, EventRevoked)
}

// lost stops the handlers of lost partitions, as revoked does, without a
// commit: the member is no longer in the group that would take it.
func (c *Consumer) lost(ctx context.Context, cl *kgo.Client, tps map[string][]int32) {
	c.give(ctx, cl, tps, ErrLost, EventLost)
}

func (c *Consumer) give(ctx context.Context, cl *kgo.Client, tps map[string][]int32, cause error, kind EventKind) {
	parts := c.take(tps)
	for _, p := range parts {
		p.stop(cause)
	}
	if !waitAll(parts, c.o.DrainTimeout()) {
		c.o.Logger().ErrorContext(ctx, c.o.Names().Pkg+": handlers of given-up partitions did not return in time; going on without them",
			slog.Duration("timeout", c.o.DrainTimeout()), slog.Any("cause", cause))
	}
	if kind == EventRevoked {
		cctx, cancel := context.WithTimeout(ctx, c.commitTimeout())
		if err := c.commit(cctx, parts); err != nil {
			c.o.Logger().WarnContext(ctx, c.o.Names().Pkg+": commit of revoked partitions", slog.Any("error", err))
		}
		cancel()
	}
	c.unpause(cl, parts)
	for topic, ps := range tps {
		for _, p := range ps {
			c.o.Logger().InfoContext(ctx, c.o.Names().Pkg+": partition "+kind.String(), slog.String("topic", topic), slog.Int("partition", int(p)))
			c.observe(ctx, Event{Kind: kind, Topic: topic, Partition: p})
		}
	}
}

func (c *Consumer) adjustOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	c.mu.Lock()
	cl := c.client
	c.mu.Unlock()
	if cl == nil {
		return nil, fmt.Errorf("%s: offsets asked for before any assignment", c.o.Names().Pkg)
	}
	return c.adjust(ctx, cl, offsets)
}

// commitLoop commits the finished offsets every commit interval until ctx
// ends.
func (c *Consumer) commitLoop(ctx context.Context) {
	t := time.NewTicker(c.o.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.commitMu.Lock()
		c.mu.Lock()
		parts := make([]*Partition, 0, len(c.parts))
		for _, p := range c.parts {
			parts = append(parts, p)
		}
		c.mu.Unlock()
		err := c.commitLocked(ctx, parts)
		c.commitMu.Unlock()
		if err != nil && ctx.Err() == nil {
			c.o.Logger().WarnContext(ctx, c.o.Names().Pkg+": commit", slog.Any("error", err))
		}
	}
}

// commit commits the finished offsets of parts that are not committed yet.
func (c *Consumer) commit(ctx context.Context, parts []*Partition) error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	return c.commitLocked(ctx, parts)
}

func (c *Consumer) commitLocked(ctx context.Context, parts []*Partition) error {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	var todo []*Partition
	var cl *kgo.Client
	for _, p := range parts {
		next, ok := p.uncommitted()
		if !ok {
			continue
		}
		if offsets[p.Topic] == nil {
			offsets[p.Topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[p.Topic][p.Partition] = next
		todo = append(todo, p)
		cl = p.client
	}
	if len(todo) == 0 {
		return nil
	}
	var err error
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, rerr error) {
		err = rerr
		if resp != nil && err == nil {
			for _, t := range resp.Topics {
				for _, pr := range t.Partitions {
					if perr := kerr.ErrorForCode(pr.ErrorCode); perr != nil && err == nil {
						err = fmt.Errorf("commit of %s/%d: %w", t.Topic, pr.Partition, perr)
					}
				}
			}
		}
	})
	for _, p := range todo {
		next := offsets[p.Topic][p.Partition]
		if err == nil {
			p.committedTo(next.Offset)
		}
		c.observe(ctx, Event{Kind: EventCommit, Topic: p.Topic, Partition: p.Partition, Offset: next.Offset, Err: err})
	}
	return err
}
