package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/internal/demo"
	"github.com/idemgo/idem/storage"
)

// kafkaPartitions is how many partitions the demo's topics have.
const kafkaPartitions = 8

// msgHeader carries a record's index in the stream, for the crash plan
// and the tally.
const msgHeader = "demo-msg"

// runKafka is the demo over Kafka: the same stream, published to a topic
// of the Kafka cluster at addrs, consumed by a consumer group of
// o.Consumers processes, naive ones, then idemkafka ones. Each run has a
// topic and a group of its own, named after the run, deleted at the end.
// A process that crashes dies where the plan says: it charges or commits
// nothing more, its store calls fail, and its client leaves the group
// without committing; a new process takes its slot. Kafka redelivers what
// was not committed to the members that get the partitions.
func runKafka(ctx context.Context, o demo.Options, addrs []string, store storage.Store, stdout, stderr io.Writer) (naive, guarded demo.Report, err error) {
	where := "Kafka at " + strings.Join(addrs, ",")
	repeat := "--broker kafka --brokers " + strings.Join(addrs, ",")
	admin, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return naive, guarded, err
	}
	defer admin.Close()
	run := time.Now().UnixNano()
	naiveTopic, topic := fmt.Sprintf("idem-demo.orders-naive.%d", run), fmt.Sprintf("idem-demo.orders-idem.%d", run)
	if err := createKafkaTopics(ctx, admin, naiveTopic, topic); err != nil {
		return naive, guarded, err
	}
	defer func() {
		err = errors.Join(err, deleteKafkaTopics(ctx, admin, naiveTopic, topic))
		if err == nil {
			fmt.Fprintf(stdout, "Deleted the topics %s and %s.\n", naiveTopic, topic)
		}
	}()

	stream := demo.NewStream(o.Seed, o.Messages, o.DupRate)
	plan := demo.CrashPlan{Seed: o.Seed, Rate: o.CrashRate}
	fmt.Fprintf(stdout, "idem demo: %d orders, %d consumers, dup rate %v, crash rate %v, store %s\n",
		o.Messages, o.Consumers, o.DupRate, o.CrashRate, o.StoreName)
	fmt.Fprintf(stdout, "broker: %s, topics %s and %s of %d partitions\n", where, naiveTopic, topic, kafkaPartitions)
	fmt.Fprintf(stdout, "seed %d (repeat this run with --seed %d %s)\n", o.Seed, o.Seed, repeat)

	naive, err = runKafkaStream(ctx, o, addrs, admin, naiveTopic, "naive", stream, plan, stderr, nil)
	if err != nil {
		return naive, guarded, err
	}
	defer func() {
		err = errors.Join(err, demo.CleanUp(ctx, o, store, idem.Config{Namespace: kafkaNamespace(topic), Retention: time.Hour}, stream, stdout))
	}()
	guarded, err = runKafkaStream(ctx, o, addrs, admin, topic, "idem", stream, plan, stderr, store)
	if err != nil {
		return naive, guarded, err
	}

	fmt.Fprintln(stdout)
	demo.WriteTable(stdout, naive, guarded)
	fmt.Fprintf(stdout, "\ncrashes before the charge / after it: naive %d / %d, idem %d / %d. A crashed consumer commits nothing:\n"+
		"its partitions go to the other members, which get every record after the last commit again. The naive\n"+
		"consumer charges them again; idem's finds their outcome (after the charge, idem's consumer crashes once\n"+
		"the outcome is stored), or the order held by the dead consumer: %d orders were taken over once the %v\n"+
		"lease ended, and %d claims found their order in progress and were retried after a pause.\n",
		naive.Crashes[demo.CrashBeforeCharge], naive.Crashes[demo.CrashAfterCharge],
		guarded.Crashes[demo.CrashBeforeCharge], guarded.Crashes[demo.CrashAfterCharge],
		guarded.Takeovers, demo.Lease, guarded.Busy)
	if guarded.DoubleCharges > 0 || guarded.Lost > 0 {
		return naive, guarded, fmt.Errorf("idem: demo failed: the idem consumer made %d double charges and lost %d orders (seed %d, %s)",
			guarded.DoubleCharges, guarded.Lost, o.Seed, repeat)
	}
	fmt.Fprintf(stdout, "\nOK: idem charged every order once in this run; the naive consumer made %d double charges.\n", naive.DoubleCharges)
	fmt.Fprint(stdout, demo.Limit)
	return naive, guarded, nil
}

// kafkaNamespace is the namespace of the guarded run on topic: a fresh
// one, so that the records of earlier runs in a shared store stay out of
// the way.
func kafkaNamespace(topic string) string { return "idem-demo/" + topic }

// createKafkaTopics creates the topics named, of kafkaPartitions
// partitions each and as many replicas as the brokers' default
// (default.replication.factor).
func createKafkaTopics(ctx context.Context, admin *kgo.Client, names ...string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	for _, name := range names {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = name, kafkaPartitions, -1
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		return fmt.Errorf("idem: demo: creating the topics %v: %w", names, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Errorf("idem: demo: creating the topic %s: %w", t.Topic, err)
		}
	}
	return nil
}

// deleteKafkaTopics deletes the topics named, even once ctx has ended
// (an interrupted run still cleans up), within 30 seconds.
func deleteKafkaTopics(ctx context.Context, admin *kgo.Client, names ...string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 30000
	for _, name := range names {
		t := kmsg.NewDeleteTopicsRequestTopic()
		t.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		return fmt.Errorf("idem: demo: deleting the topics %v: %w", names, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && t.Topic != nil {
			return fmt.Errorf("idem: demo: deleting the topic %s: %w", *t.Topic, err)
		}
	}
	return nil
}

// kafkaRun is one run of the stream through a consumer group.
type kafkaRun struct {
	o        demo.Options
	addrs    []string    // the seed brokers
	admin    *kgo.Client // for the group's committed offsets
	name     string
	topic    string
	stream   []demo.Message
	pos      []kgo.EpochOffset // by message: its partition in Epoch, its offset
	plan     demo.CrashPlan
	ledger   *demo.Ledger
	stats    demo.RunStats
	attempts []atomic.Int32 // by message: deliveries so far
	delivers atomic.Int64
	acked    atomic.Int64                  // records committed, for the progress bar
	commits  [kafkaPartitions]atomic.Int64 // by partition: the group's committed offset, as last fetched
	released chan struct{}                 // closed at the end: dead handlers return
}

// runKafkaStream publishes the stream to topic (on the brokers addrs, with
// admin a client of theirs) and consumes it, as the group named topic,
// with o.consumers slots, each running one process after another, until
// every record is committed or o.timeout passes. store is nil for the
// naive consumer.
func runKafkaStream(ctx context.Context, o demo.Options, addrs []string, admin *kgo.Client, topic, name string, stream []demo.Message, plan demo.CrashPlan,
	stderr io.Writer, store storage.Store) (demo.Report, error) {
	r := &kafkaRun{o: o, addrs: addrs, admin: admin, name: name, topic: topic,
		stream: stream, pos: make([]kgo.EpochOffset, len(stream)), plan: plan, ledger: demo.NewLedger(o.Messages),
		attempts: make([]atomic.Int32, len(stream)), released: make(chan struct{})}
	if err := r.publish(ctx); err != nil {
		return demo.Report{}, err
	}
	runCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	stopProgress := demo.StartProgress(stderr, name, len(stream), r.acked.Load)
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { r.watchCommits(runCtx, cancel) })
	errs := make([]error, o.Consumers)
	for i := range o.Consumers {
		wg.Go(func() {
			for runCtx.Err() == nil && errs[i] == nil {
				p := &demo.Process{Stats: &r.stats}
				if store == nil {
					errs[i] = r.naiveProcess(runCtx, p)
				} else {
					errs[i] = r.guardedProcess(runCtx, p, store)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(r.released)
	stopProgress()
	if err := errors.Join(errs...); err != nil {
		return demo.Report{}, err
	}
	if ctx.Err() != nil {
		return demo.Report{}, fmt.Errorf("idem: demo interrupted: %w", context.Cause(ctx))
	}
	if err := r.fetchCommits(ctx); err != nil {
		return demo.Report{}, err
	}
	return demo.Tally(name, r.ledger, r.brokerStats(), &r.stats, elapsed, !r.complete()), nil
}

// publish produces the stream, message i to partition i mod the
// partitions, so that an order's copies land on different partitions and
// meet different consumers.
func (r *kafkaRun) publish(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(r.stream))
	for i, m := range r.stream {
		recs[i] = &kgo.Record{Topic: r.topic, Partition: int32(i % kafkaPartitions), Value: m.Payload, Headers: []kgo.RecordHeader{
			{Key: idemkafka.DefaultKeyHeader, Value: []byte(m.Key)},
			{Key: msgHeader, Value: strconv.AppendInt(nil, int64(i), 10)},
		}}
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		return fmt.Errorf("idem: demo: publishing to Kafka: %w", err)
	}
	for i, pr := range res {
		r.pos[i] = kgo.EpochOffset{Epoch: pr.Record.Partition, Offset: pr.Record.Offset}
	}
	return nil
}

// fetchCommits asks Kafka for the group's committed offset of each
// partition and keeps them in r.commits.
func (r *kafkaRun) fetchCommits(ctx context.Context) error {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = r.topic
	t := kmsg.NewOffsetFetchRequestTopic()
	t.Topic = r.topic
	for p := range int32(kafkaPartitions) {
		t.Partitions = append(t.Partitions, p)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, r.admin)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("idem: demo: fetching the committed offsets of group %s: %w", r.topic, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if t.Topic == r.topic && p.Partition >= 0 && p.Partition < kafkaPartitions && p.ErrorCode == 0 && p.Offset > 0 {
				r.commits[p.Partition].Store(p.Offset)
			}
		}
	}
	return nil
}

// committed returns the group's committed offset of each partition, as
// last fetched.
func (r *kafkaRun) committed() [kafkaPartitions]int64 {
	var out [kafkaPartitions]int64
	for p := range out {
		out[p] = r.commits[p].Load()
	}
	return out
}

// complete reports whether every record is committed.
func (r *kafkaRun) complete() bool { return r.acked.Load() == int64(len(r.stream)) }

// watchCommits follows the group's commits and ends the run once every
// record is committed.
func (r *kafkaRun) watchCommits(ctx context.Context, done context.CancelFunc) {
	for ctx.Err() == nil {
		_ = r.fetchCommits(ctx) // a failed fetch is tried again at the next tick
		var n int64
		for _, c := range r.committed() {
			n += c
		}
		r.acked.Store(n)
		if r.complete() {
			done()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// brokerStats is the run's tally from Kafka's side: an order is unacked
// when a record of it lies at or past its partition's committed offset.
func (r *kafkaRun) brokerStats() demo.BrokerStats {
	st := demo.BrokerStats{Deliveries: int(r.delivers.Load()), Unacked: make([]bool, r.o.Messages)}
	committed := r.committed()
	for i, m := range r.stream {
		if m.Duplicate {
			st.Duplicates++
		}
		if r.pos[i].Offset >= committed[r.pos[i].Epoch] {
			st.Unacked[m.Order] = true
		}
	}
	return st
}

// clientOpts are a consumer process's client options: quick fetches, and
// rebalances within a second of a member's leaving. A crashed process's
// client leaves the group as it closes, so the session timeout only bounds
// what the demo does not do, a member that vanishes: the 6 seconds every
// broker accepts by default (group.min.session.timeout.ms).
func (r *kafkaRun) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	session := 6 * time.Second
	return append([]kgo.Opt{
		kgo.SeedBrokers(r.addrs...),
		kgo.ConsumerGroup(r.topic),
		kgo.ConsumeTopics(r.topic),
		kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.SessionTimeout(session),
		kgo.RebalanceTimeout(10 * time.Second),
	}, extra...)
}

// deliver counts a delivery of rec and returns its message and where, if
// anywhere, its process crashes.
func (r *kafkaRun) deliver(rec *kgo.Record) (int, demo.CrashPoint) {
	var idx int
	for _, h := range rec.Headers {
		if h.Key == msgHeader {
			idx, _ = strconv.Atoi(string(h.Value))
		}
	}
	r.delivers.Add(1)
	attempt := int(r.attempts[idx].Add(1))
	return idx, r.plan.At(idx, attempt)
}

// naiveProcess consumes and charges every record it gets, committing each
// right after its charge, until ctx ends or it crashes: as careful as a
// consumer without idempotency can be, and still a record charged and not
// committed when the process dies is charged again by the next.
func (r *kafkaRun) naiveProcess(ctx context.Context, p *demo.Process) error {
	cl, err := kgo.NewClient(r.clientOpts(kgo.DisableAutoCommit())...)
	if err != nil {
		return err
	}
	defer cl.Close() // after a crash: leaves the group without a commit
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		for _, rec := range fs.Records() {
			idx, point := r.deliver(rec)
			if point == demo.CrashBeforeCharge {
				r.stats.Crashes[point].Add(1)
				return nil
			}
			r.ledger.Charge(r.stream[idx].Order)
			if point == demo.CrashAfterCharge {
				r.stats.Crashes[point].Add(1)
				return nil
			}
			// An error is a rebalance: the record comes again, and is charged again.
			_ = cl.CommitRecords(ctx, rec)
		}
	}
}

// guardedProcess consumes with idemkafka, charging inside the Guard, until
// ctx ends or it crashes. A crash before the charge happens in the
// handler, holding the key; after the charge, once the outcome is stored
// and before the offset is committed. The dead process's handler never
// returns (until the run ends), its store calls fail (processStore), and
// its client leaves the group.
func (r *kafkaRun) guardedProcess(ctx context.Context, p *demo.Process, store storage.Store) error {
	crashed := make(chan struct{})
	var once sync.Once
	var cl *kgo.Client
	die := func(point demo.CrashPoint) {
		once.Do(func() {
			p.Dead.Store(true)
			r.stats.Crashes[point].Add(1)
			close(crashed)
		})
		<-r.released
	}
	var crashAfter sync.Map // keys whose process dies once their outcome is stored
	guard, err := idem.New(demo.ProcessStore{Store: store, Process: p}, idem.Config{
		Namespace: kafkaNamespace(r.topic),
		Lease:     demo.Lease,
		Retention: time.Hour,
		Observer: func(_ context.Context, e idem.Event) {
			if e.Op == idem.OpComplete && e.Err == nil {
				if _, ok := crashAfter.Load(e.Key); ok {
					die(demo.CrashAfterCharge)
				}
			}
		},
	})
	if err != nil {
		return err
	}
	defer guard.Close()
	consumer, err := idemkafka.New(guard, func(ctx context.Context, rec *kgo.Record) error {
		idx, point := r.deliver(rec)
		if p.Dead.Load() {
			<-r.released
			return demo.ErrProcessDead
		}
		if point == demo.CrashBeforeCharge {
			die(point) // holding the key: it stays until the lease ends
			return demo.ErrProcessDead
		}
		if err := ctx.Err(); err != nil {
			return err // the lease is lost: someone else may charge now
		}
		p.Charge(ctx, r.ledger, r.stream[idx].Order)
		if point == demo.CrashAfterCharge {
			crashAfter.Store(r.stream[idx].Key, true)
		}
		return nil
	}, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithCommitInterval(100*time.Millisecond), idemkafka.WithDrainTimeout(100*time.Millisecond),
		idemkafka.WithRetryBackoff(20*time.Millisecond, 200*time.Millisecond), idemkafka.WithMaxBatch(64),
		idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
			if e.Kind == idemkafka.EventBatch {
				r.delivers.Add(int64(e.Replayed)) // replays are deliveries the handler never saw
			}
		}))
	if err != nil {
		return err
	}
	cl, err = kgo.NewClient(r.clientOpts(consumer.ClientOpts()...)...)
	if err != nil {
		return err
	}
	ran := make(chan error, 1)
	go func() { ran <- consumer.Run(ctx, cl) }()
	select {
	case err := <-ran:
		cl.Close()
		return err
	case <-crashed:
		cl.Close() // leaves without committing what was in flight
		<-ran
		return nil
	}
}
