package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemkafka/kafkapg"
)

func init() {
	brokers["kafka"] = newKafka
	consumeFuncs["kafka"] = consumeKafka
}

// The Kafka cluster of a run: kfake, in a process of its own (faults
// kfake), with kafkaBrokers brokers, each behind a proxy of the harness,
// and the run's topic of kafkaPartitions partitions.
const (
	kafkaBrokers    = 3
	kafkaPartitions = 6
)

// The consumers' group timings: a member killed with SIGKILL never leaves
// its group, so its partitions come back only when its session times out.
// Short, so that a kill costs a run a few seconds, not Kafka's default
// 45s; the cluster's minimum session timeout is lowered to allow it.
const (
	kafkaSession   = 1500 * time.Millisecond
	kafkaHeartbeat = 300 * time.Millisecond
	kafkaRebalance = 5 * time.Second
	kafkaDrain     = 2 * time.Second // under kafkaRebalance, as idemkafka asks
)

// kafkaBroker is a kfake cluster of the run's own, started by the harness
// as a process of its own on loopback ports, with one topic and one
// consumer group. Each broker advertises its proxy's address, so that a
// consumer, which learns the brokers from the cluster's metadata, reaches
// every one of them through the harness's proxies; the harness's own
// client dials the brokers directly.
type kafkaBroker struct {
	topic string
	group string
	ports []int

	offsets string        // kafkapg's offsets table, or "" when Kafka keeps the committed offsets
	db      *pgxpool.Pool // where offsets is
	cmd     *exec.Cmd
	log     *os.File
	cl      *kgo.Client
}

func newKafka(run string) (broker, error) {
	b := &kafkaBroker{topic: "idemfaults-" + run, group: "idemfaults-" + run}
	for range kafkaBrokers {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		b.ports = append(b.ports, p)
	}
	return b, nil
}

func (b *kafkaBroker) name() string    { return "kafka" }
func (b *kafkaBroker) target() string  { return b.topic }
func (b *kafkaBroker) durable() string { return b.group }

func (b *kafkaBroker) upstreams() ([]string, error) {
	addrs := make([]string, len(b.ports))
	for i, p := range b.ports {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return addrs, nil
}

// consumerURL is the seed brokers, comma-separated: the proxies.
func (b *kafkaBroker) consumerURL(proxies []string) string { return strings.Join(proxies, ",") }

// probe has nothing to reach: the harness starts its cluster itself.
func (b *kafkaBroker) probe(context.Context) error { return nil }

// kfakeSpec is what the kfake process is told, as JSON in IDEMFAULTS_KFAKE.
type kfakeSpec struct {
	Ports      []int    // one broker on each, on 127.0.0.1
	Advertise  []string // the host:port each broker names in metadata
	Topic      string
	Partitions int32
}

const kfakeEnv = "IDEMFAULTS_KFAKE"

// setup starts the cluster process, waits for it to listen, and connects
// the harness's client, which dials each broker's own port whatever the
// metadata advertises.
func (b *kafkaBroker) setup(ctx context.Context, env brokerEnv) error {
	b.offsets, b.db = env.offsets, env.db
	ups, _ := b.upstreams()
	spec, _ := json.Marshal(kfakeSpec{Ports: b.ports, Advertise: env.proxies, Topic: b.topic, Partitions: kafkaPartitions})
	cmd, stdout, log, err := startChild(env.cmd, kfakeEnv+"="+string(spec), filepath.Join(env.dir, "kfake.log"))
	if err != nil {
		return fmt.Errorf("starting kfake: %w", err)
	}
	b.cmd, b.log = cmd, log
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := sc.Scan() && sc.Text() == "ready"
		ready <- ok
		for sc.Scan() {
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			return fmt.Errorf("kfake did not start: %s", logTail(log.Name(), 5))
		}
	case <-time.After(20 * time.Second):
		return errors.New("kfake did not start within 20s")
	}
	direct := map[string]string{}
	for i, px := range env.proxies {
		direct[px] = ups[i]
	}
	var d net.Dialer
	b.cl, err = kgo.NewClient(
		kgo.SeedBrokers(ups...),
		kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			if up, ok := direct[host]; ok {
				host = up
			}
			return d.DialContext(ctx, network, host)
		}),
		kgo.DefaultProduceTopic(b.topic),
		// Keys spread over every partition, and a key's second copy
		// lands on any: duplicates are handled by different members.
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
	)
	return err
}

func (b *kafkaBroker) publish(ctx context.Context, key string, payload []byte) error {
	return b.cl.ProduceSync(ctx, &kgo.Record{Value: payload,
		Headers: []kgo.RecordHeader{{Key: keyHeader, Value: []byte(key)}}}).FirstErr()
}

// unsettled is how many records lie past the group's committed offsets
// (kafkapg: the offsets stored in PostgreSQL, which are the consumer's;
// its Kafka commits are for dashboards), over every partition.
func (b *kafkaBroker) unsettled(ctx context.Context) (int, error) {
	end, err := b.endOffsets(ctx)
	if err != nil {
		return 0, err
	}
	committed, err := b.committed(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for p, e := range end {
		n += int(e - max(committed[p], 0))
	}
	return n, nil
}

// endOffsets returns each partition's end offset (high watermark).
func (b *kafkaBroker) endOffsets(ctx context.Context) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	t := kmsg.NewListOffsetsRequestTopic()
	t.Topic = b.topic
	for p := range int32(kafkaPartitions) {
		pr := kmsg.NewListOffsetsRequestTopicPartition()
		pr.Partition, pr.Timestamp = p, -1 // latest
		t.Partitions = append(t.Partitions, pr)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, b.cl)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets: %w", err)
	}
	end := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return nil, fmt.Errorf("listing end offsets: partition %d: error code %d", p.Partition, p.ErrorCode)
			}
			end[p.Partition] = p.Offset
		}
	}
	if len(end) != kafkaPartitions {
		return nil, fmt.Errorf("listing end offsets: %d partitions answered, want %d", len(end), kafkaPartitions)
	}
	return end, nil
}

// committed returns each partition's committed offset, -1 for none.
func (b *kafkaBroker) committed(ctx context.Context) (map[int32]int64, error) {
	out := map[int32]int64{}
	if b.offsets != "" {
		for p := range int32(kafkaPartitions) {
			n, err := kafkapg.StoredOffset(ctx, b.db, b.offsets, b.group, b.topic, p)
			if err != nil {
				return nil, err
			}
			out[p] = n
		}
		return out, nil
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = b.group
	t := kmsg.NewOffsetFetchRequestTopic()
	t.Topic = b.topic
	for p := range int32(kafkaPartitions) {
		t.Partitions = append(t.Partitions, p)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, b.cl)
	if err != nil {
		return nil, fmt.Errorf("fetching committed offsets: %w", err)
	}
	if resp.ErrorCode != 0 {
		return nil, fmt.Errorf("fetching committed offsets: error code %d", resp.ErrorCode)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return nil, fmt.Errorf("fetching committed offsets: partition %d: error code %d", p.Partition, p.ErrorCode)
			}
			out[p.Partition] = p.Offset
		}
	}
	return out, nil
}

// close stops the cluster: its log is in memory, and goes with it.
func (b *kafkaBroker) close(context.Context) error {
	if b.cl != nil {
		b.cl.Close()
	}
	if b.cmd == nil {
		return nil
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		b.cmd.Process.Kill()
		<-done
	}
	return b.log.Close()
}

// kfakeMain runs the Kafka cluster process the harness starts (faults
// kfake): the brokers of IDEMFAULTS_KFAKE's spec on their ports, each
// advertising its address of the spec, until SIGTERM. It writes "ready"
// once they listen.
func kfakeMain() int {
	var spec kfakeSpec
	if err := json.Unmarshal([]byte(os.Getenv(kfakeEnv)), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "faults kfake: %s: %v (this command is started by the harness)\n", kfakeEnv, err)
		return 2
	}
	advertise := map[string]string{}
	for i, p := range spec.Ports {
		if i < len(spec.Advertise) {
			advertise[net.JoinHostPort("127.0.0.1", strconv.Itoa(p))] = spec.Advertise[i]
		}
	}
	c, err := kfake.NewCluster(
		kfake.Ports(spec.Ports...),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			ln, err := net.Listen(network, address)
			if err != nil {
				return nil, err
			}
			adv, ok := advertise[address]
			if !ok {
				return ln, nil
			}
			addr, err := net.ResolveTCPAddr("tcp", adv)
			if err != nil {
				ln.Close()
				return nil, err
			}
			return advertisedListener{ln, addr}, nil
		}),
		kfake.SeedTopics(spec.Partitions, spec.Topic),
		kfake.AllowAutoTopicCreation(), // the dead-letter topic, if a run ever needs it
		kfake.GroupMinSessionTimeout(kafkaSession),
		kfake.WithLogger(kfake.BasicLogger(os.Stderr, kfake.LogLevelWarn)),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults kfake:", err)
		return 1
	}
	defer c.Close()
	fmt.Println("ready")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	return 0
}

// advertisedListener is a broker's listener that names another address:
// kfake advertises its listener's address in metadata.
type advertisedListener struct {
	net.Listener
	addr net.Addr
}

func (l advertisedListener) Addr() net.Addr { return l.addr }

// consumeKafka is the consumer process on Kafka: idemkafka with the
// Guard, or, in tx mode, kafkapg, which commits each record's effect, its
// outcome and its partition's offset in one PostgreSQL transaction; over a
// kgo.Client in the run's group, through the harness's proxies.
func consumeKafka(ctx context.Context, s consumerSpec, g *idem.Guard, c *consumer) error {
	var cl *kgo.Client
	key := func(r *kgo.Record) string {
		for _, hd := range r.Headers {
			if hd.Key == keyHeader {
				return string(hd.Value)
			}
		}
		return ""
	}
	copts := []idemkafka.Option{
		idemkafka.WithSharedScope(),
		idemkafka.WithKeyHeader(keyHeader),
		idemkafka.WithMaxBatch(16),
		idemkafka.WithCommitInterval(250 * time.Millisecond),
		idemkafka.WithDrainTimeout(kafkaDrain),
		idemkafka.WithRetryBackoff(s.RetryDelay, time.Second),
		idemkafka.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))),
		idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
			switch e.Kind {
			case idemkafka.EventDeadLetter:
				events.emit(evDead, "", "dead-letter")
			case idemkafka.EventAssigned:
				events.emit(evReady)
			}
		}),
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(s.BrokerURL, ",")...),
		kgo.ConsumerGroup(s.Durable),
		kgo.ConsumeTopics(s.Target),
		kgo.SessionTimeout(kafkaSession),
		kgo.HeartbeatInterval(kafkaHeartbeat),
		kgo.RebalanceTimeout(kafkaRebalance),
		// The group's joins (and who was told it leads), assignments and
		// retries, in the consumer's log: IDEMFAULTS_KEEP=1 keeps it.
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)),
	}
	var run interface {
		ClientOpts() []kgo.Opt
		Run(context.Context, *kgo.Client) error
	}
	if s.Mode == modeTx {
		// kafkapg: no Guard. A record's claim, its effect, its outcome and
		// its partition's next offset are one transaction; the kill points
		// are where the client hands the record over (before-claim), in
		// the handler, and after the commit.
		kc, err := kafkapg.New(faultDB{Pool: c.pool, c: c}, func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
			return c.handleInTx(ctx, tx, key(r))
		},
			kafkapg.WithRecordsTable(s.Records),
			kafkapg.WithOffsetsTable(s.Offsets),
			kafkapg.WithNamespace(s.Namespace),
			kafkapg.WithConsumerOptions(copts...),
		)
		if err != nil {
			return err
		}
		run = kc
		opts = append(opts, kgo.WithHooks(pollHook{c: c, key: key}))
	} else {
		kc, err := idemkafka.New(g, func(ctx context.Context, r *kgo.Record) error {
			// The broken build's early "ack" is a synchronous commit of
			// the record's offset: done before anything else happens.
			return c.handle(ctx, key(r), r.Value, func() { cl.CommitRecords(ctx, r) })
		}, copts...)
		if err != nil {
			return err
		}
		run = kc
	}
	var err error
	if cl, err = kgo.NewClient(append(opts, run.ClientOpts()...)...); err != nil {
		return err
	}
	defer cl.Close()
	err = run.Run(ctx, cl)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// pollHook is the before-claim kill point of kafkapg, whose claims are
// inside its transactions: a record handed over by the client, its key not
// claimed yet.
type pollHook struct {
	c   *consumer
	key func(*kgo.Record) string
}

func (h pollHook) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if !polled {
		return
	}
	k := h.key(r)
	events.emit(evDelivery, k)
	h.c.point(killBeforeClaim, k)
}

// faultDB is kafkapg's database with the after-commit kill point: right
// after a transaction holding effects, outcomes and an offset committed.
type faultDB struct {
	*pgxpool.Pool
	c *consumer
}

func (db faultDB) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := db.Pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return faultTx{Tx: tx, c: db.c}, nil
}

type faultTx struct {
	pgx.Tx
	c *consumer
}

func (tx faultTx) Commit(ctx context.Context) error {
	if err := tx.Tx.Commit(ctx); err != nil {
		return err
	}
	tx.c.point(killAfterCommit, "")
	return nil
}
