package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
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

// The Kafka cluster of a run: Apache Kafka, kafkaNodes KRaft nodes (each
// a broker and a controller) that the harness starts with
// scripts/kafka.sh, each behind a proxy of the harness, and the run's
// topic of kafkaPartitions partitions, each replicated on every node.
// Records are acknowledged once kafkaMinISR replicas have them
// (acks=all), so a node can die without losing one.
const (
	kafkaNodes      = 3
	kafkaMinISR     = 2
	kafkaPartitions = 6
	// kafkaHeap is each node's heap: the JVM's resident size is about
	// 350 MB with it.
	kafkaHeap = "-Xms64m -Xmx384m"
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

// kafkaScriptEnv names scripts/kafka.sh when the suite does not run inside
// the repository.
const kafkaScriptEnv = "IDEMFAULTS_KAFKA_SH"

// kafkaBroker is an Apache Kafka cluster of the run's own, on loopback
// ports and with its data in the run's directory, with one topic and one
// consumer group. Each node advertises its proxy's address to clients, so
// that a consumer, which learns the brokers from the cluster's metadata,
// reaches every one of them through the harness's proxies; the nodes
// replicate among themselves on a listener of their own, which no proxy
// cuts, and the harness's own client dials the nodes directly.
type kafkaBroker struct {
	topic string
	group string
	nodes []*kafkaNode

	script  string        // scripts/kafka.sh
	offsets string        // kafkapg's offsets table, or "" when Kafka keeps the committed offsets
	db      *pgxpool.Pool // where offsets is
	cl      *kgo.Client
}

// kafkaNode is one node of the cluster: the process of `kafka.sh run dir`,
// which becomes the broker's JVM, so that killing it is a crash of the
// node. A node started again keeps its ports and its data.
type kafkaNode struct {
	id         int32
	dir        string
	port       int // clients', advertised as the proxy's address
	internal   int // replication between the nodes
	controller int // KRaft

	cmd   *exec.Cmd
	done  chan struct{} // closed when cmd has ended
	log   *os.File
	since int64 // where this start's output begins in log
}

func newKafka(run string) (broker, error) {
	b := &kafkaBroker{topic: "idemfaults-" + run, group: "idemfaults-" + run}
	var ports []int
	for len(ports) < 3*kafkaNodes {
		p, err := quietPort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	for i := range kafkaNodes {
		b.nodes = append(b.nodes, &kafkaNode{id: int32(i + 1), port: ports[3*i], internal: ports[3*i+1], controller: ports[3*i+2]})
	}
	return b, nil
}

// quietPort returns a free loopback port below the usual range of
// ephemeral ports (32768 and up), so that no outgoing connection takes it
// while its node is down between a crash and its restart.
func quietPort() (int, error) {
	for range 100 {
		p := 20000 + mrand.IntN(12000)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			ln.Close()
			return p, nil
		}
	}
	return 0, errors.New("no free loopback port between 20000 and 32000")
}

func (b *kafkaBroker) name() string    { return "kafka" }
func (b *kafkaBroker) target() string  { return b.topic }
func (b *kafkaBroker) durable() string { return b.group }

func (b *kafkaBroker) upstreams() ([]string, error) {
	addrs := make([]string, len(b.nodes))
	for i, n := range b.nodes {
		addrs[i] = n.addr()
	}
	return addrs, nil
}

func (n *kafkaNode) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// consumerURL is the seed brokers, comma-separated: the proxies.
func (b *kafkaBroker) consumerURL(proxies []string) string { return strings.Join(proxies, ",") }

// probe checks that Apache Kafka is installed for scripts/kafka.sh: the
// harness starts its cluster itself.
func (b *kafkaBroker) probe(context.Context) error {
	_, err := kafkaScript()
	return err
}

// kafkaScript finds scripts/kafka.sh ($IDEMFAULTS_KAFKA_SH, or in the
// working directory or one above it: the suite runs in integration/ or
// integration/faults) and checks that it has Apache Kafka installed.
func kafkaScript() (string, error) {
	script := os.Getenv(kafkaScriptEnv)
	if script == "" {
		dir, err := os.Getwd()
		if err != nil {
			return "", err
		}
		for {
			if p := filepath.Join(dir, "scripts", "kafka.sh"); fileExists(p) {
				script = p
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				return "", fmt.Errorf("scripts/kafka.sh is not in the working directory or above it: run the suite in the repository, or set %s", kafkaScriptEnv)
			}
			dir = parent
		}
	}
	out, err := exec.Command(script, "home").Output()
	if err != nil {
		return "", fmt.Errorf("%s home: %w", script, err)
	}
	home := strings.TrimSpace(string(out))
	if !fileExists(filepath.Join(home, "installed")) {
		return "", fmt.Errorf("Apache Kafka is not installed in %s: run scripts/services.sh (or scripts/kafka.sh install)", home)
	}
	return script, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// setup writes each node's configuration in the run's directory, starts
// the nodes, connects the harness's client, which dials each node's own
// port whatever the metadata advertises, and creates the run's topic once
// every node has joined.
func (b *kafkaBroker) setup(ctx context.Context, env brokerEnv) error {
	b.offsets, b.db = env.offsets, env.db
	var err error
	if b.script, err = kafkaScript(); err != nil {
		return err
	}
	id, err := kafkaClusterID()
	if err != nil {
		return err
	}
	for i, n := range b.nodes {
		n.dir = filepath.Join(env.dir, "kafka-"+strconv.Itoa(int(n.id)))
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(n.dir, "cluster.id"), []byte(id+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(n.dir, "server.properties"), []byte(b.properties(n, env.proxies[i])), 0o644); err != nil {
			return err
		}
	}
	for _, n := range b.nodes {
		if err := n.start(b.script); err != nil {
			return err
		}
	}
	direct := map[string]string{}
	var seeds []string
	for i, n := range b.nodes {
		direct[env.proxies[i]] = n.addr()
		seeds = append(seeds, n.addr())
	}
	var d net.Dialer
	b.cl, err = kgo.NewClient(
		kgo.SeedBrokers(seeds...),
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
		// franz-go's defaults, said out loud: the producer is idempotent
		// and a record is acknowledged once every in-sync replica has it,
		// so a produce retried across a node's crash is written once and
		// an acknowledged record survives the crash.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// A partition's new leader is looked up at once after a crash.
		kgo.MetadataMinAge(250*time.Millisecond),
	)
	if err != nil {
		return err
	}
	if err := b.awaitHealthy(ctx, 2*time.Minute); err != nil {
		return err
	}
	if err := b.createTopic(ctx); err != nil {
		return err
	}
	return b.awaitHealthy(ctx, time.Minute)
}

// kafkaClusterID returns a new cluster id: 16 random bytes in unpadded
// base64url, as Kafka writes them, not starting with "-" (which a command
// line would take for an option).
func kafkaClusterID() (string, error) {
	for {
		var u [16]byte
		if _, err := rand.Read(u[:]); err != nil {
			return "", err
		}
		if id := base64.RawURLEncoding.EncodeToString(u[:]); id[0] != '-' {
			return id, nil
		}
	}
}

// properties is node n's server.properties: a KRaft node that is both
// broker and controller, on its ports, advertising advertised to clients.
// The session timeouts are short: the group's, for the consumers' 1.5s
// sessions, and the nodes' own with the controller, so that a crashed
// node is fenced, and its partitions get new leaders, within seconds, and
// a restarted node may register again that soon.
func (b *kafkaBroker) properties(n *kafkaNode, advertised string) string {
	var voters []string
	for _, v := range b.nodes {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", v.id, v.controller))
	}
	rf, isr := len(b.nodes), min(kafkaMinISR, len(b.nodes))
	return fmt.Sprintf(`# Written by the fault suite (integration/faults): node %[1]d of a run's cluster.
process.roles=broker,controller
node.id=%[1]d
controller.quorum.voters=%[2]s
listeners=CLIENT://127.0.0.1:%[3]d,INTERNAL://127.0.0.1:%[4]d,CONTROLLER://127.0.0.1:%[5]d
advertised.listeners=CLIENT://%[6]s,INTERNAL://127.0.0.1:%[4]d
controller.listener.names=CONTROLLER
listener.security.protocol.map=CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
log.dirs=%[7]s
num.partitions=1
default.replication.factor=%[8]d
min.insync.replicas=%[9]d
auto.create.topics.enable=true
unclean.leader.election.enable=false
offsets.topic.replication.factor=%[8]d
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=%[8]d
transaction.state.log.min.isr=%[9]d
share.coordinator.state.topic.replication.factor=%[8]d
share.coordinator.state.topic.min.isr=%[9]d
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
group.consumer.min.session.timeout.ms=1000
group.consumer.min.heartbeat.interval.ms=500
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
replica.lag.time.max.ms=5000
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
`, n.id, strings.Join(voters, ","), n.port, n.internal, n.controller, advertised, filepath.Join(n.dir, "data"), rf, isr)
}

// start starts the node: kafka.sh formats its log directory if it is new
// and becomes the node's JVM. Its output goes to kafka.log in its
// directory.
func (n *kafkaNode) start(script string) error {
	log, err := os.OpenFile(filepath.Join(n.dir, "kafka.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	since, err := log.Seek(0, io.SeekEnd)
	if err != nil {
		log.Close()
		return err
	}
	cmd := exec.Command(script, "run", n.dir)
	cmd.Env = append(os.Environ(), "KAFKA_HEAP_OPTS="+kafkaHeap)
	cmd.Stdout, cmd.Stderr = log, log
	// A group of its own, so that a kill reaches the formatting JVM too
	// if the node is killed before it becomes the broker.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting Kafka node %d: %w", n.id, err)
	}
	n.cmd, n.log, n.since, n.done = cmd, log, since, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(n.done)
	return nil
}

// why says why the node's process ended: the errors it logged since it
// started, or the end of its log.
func (n *kafkaNode) why() string {
	b, _ := os.ReadFile(n.log.Name())
	b = b[min(int(n.since), len(b)):]
	var errs []string
	for l := range strings.Lines(string(b)) {
		if strings.Contains(l, "] ERROR ") || strings.Contains(l, "] FATAL ") || strings.HasPrefix(l, "kafka.sh:") {
			errs = append(errs, strings.TrimSpace(l))
		}
	}
	if len(errs) == 0 {
		return logTail(n.log.Name(), 5)
	}
	return strings.Join(errs[:min(3, len(errs))], " | ")
}

// kill crashes the node with SIGKILL and waits for it to be gone.
func (n *kafkaNode) kill() {
	if n.cmd == nil {
		return
	}
	syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
	n.log.Close()
	n.cmd = nil
}

// awaitHealthy waits until every node is registered with the controller
// and every partition of every topic (the run's, and Kafka's own offsets
// topic once it exists) has a leader and all its replicas in sync.
func (b *kafkaBroker) awaitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		why := b.unhealthy(ctx)
		if why == "" {
			return nil
		}
		for _, n := range b.nodes {
			select {
			case <-n.done:
				return fmt.Errorf("%w: node %d: %s", errNodeExited, n.id, n.why())
			default:
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the Kafka cluster is not healthy after %v: %s", timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unhealthy says what is not healthy yet in the cluster, or "".
func (b *kafkaBroker) unhealthy(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, b.cl) // every topic
	if err != nil {
		return err.Error()
	}
	if len(resp.Brokers) != len(b.nodes) {
		return fmt.Sprintf("%d of %d nodes registered", len(resp.Brokers), len(b.nodes))
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			switch {
			case p.ErrorCode != 0:
				return fmt.Sprintf("%s[%d]: %v", *t.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
			case p.Leader < 0:
				return fmt.Sprintf("%s[%d] has no leader", *t.Topic, p.Partition)
			case len(p.ISR) < len(p.Replicas):
				return fmt.Sprintf("%s[%d] has %d of %d replicas in sync", *t.Topic, p.Partition, len(p.ISR), len(p.Replicas))
			}
		}
	}
	return ""
}

// createTopic creates the run's topic, with a replica on every node.
func (b *kafkaBroker) createTopic(ctx context.Context) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = b.topic, kafkaPartitions, int16(len(b.nodes))
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, b.cl)
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", b.topic, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", b.topic, err)
		}
	}
	return nil
}

// crash kills the node leading a partition of the run's topic, chosen at
// random, with SIGKILL, and starts it again on the same ports with the
// same data. It returns once the cluster is healthy again (every replica
// in sync, so that a next crash leaves every partition writable), saying
// what it did.
func (b *kafkaBroker) crash(ctx context.Context) (string, error) {
	p := int32(mrand.IntN(kafkaPartitions))
	leader, err := b.leaderOf(ctx, p)
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(b.nodes, func(n *kafkaNode) bool { return n.id == leader })
	if i < 0 {
		return "", fmt.Errorf("partition %d's leader is node %d, which is not the run's", p, leader)
	}
	n := b.nodes[i]
	start := time.Now()
	n.kill()
	what := fmt.Sprintf("node %d (leader of partition %d) killed", n.id, p)
	// The other nodes' metadata names the dead node for seconds, until the
	// controller fences it: the restarted node answering is what says it
	// is back; then its replicas catch up. A node that gives up while it
	// starts (Kafka's own startup failing, not what the run tests) is
	// started again, and the event says so.
	for attempt := 1; ; attempt++ {
		if err := n.start(b.script); err != nil {
			return "", err
		}
		err := b.awaitAnswer(ctx, n, 2*time.Minute)
		if err == nil {
			break
		}
		if !errors.Is(err, errNodeExited) || attempt == 3 {
			return "", err
		}
		what += fmt.Sprintf("; its restart %d failed (%v)", attempt, err)
		n.kill()
	}
	up := time.Since(start)
	if err := b.awaitHealthy(ctx, 2*time.Minute); err != nil {
		return "", fmt.Errorf("after node %d's crash: %w", n.id, err)
	}
	return fmt.Sprintf("%s; answering again after %v, all replicas in sync after %v",
		what, up.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond)), nil
}

// errNodeExited is a node's process ending while the harness waits for it.
var errNodeExited = errors.New("Kafka node exited")

// awaitAnswer waits until node n answers a request of the harness's
// client.
func (b *kafkaBroker) awaitAnswer(ctx context.Context, n *kafkaNode, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := b.cl.Broker(int(n.id)).Request(rctx, kmsg.NewPtrApiVersionsRequest())
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-n.done:
			return fmt.Errorf("%w: node %d, after its restart: %s", errNodeExited, n.id, n.why())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("Kafka node %d does not answer %v after its restart: %w", n.id, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// leaderOf returns the node leading partition p of the run's topic.
func (b *kafkaBroker) leaderOf(ctx context.Context, p int32) (int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(b.topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, b.cl)
	if err != nil {
		return 0, fmt.Errorf("finding partition %d's leader: %w", p, err)
	}
	for _, t := range resp.Topics {
		for _, tp := range t.Partitions {
			if tp.Partition == p && tp.ErrorCode == 0 && tp.Leader >= 0 {
				return tp.Leader, nil
			}
		}
	}
	return 0, fmt.Errorf("partition %d of %s has no leader", p, b.topic)
}

func (b *kafkaBroker) publish(ctx context.Context, key string, payload []byte) error {
	return b.cl.ProduceSync(ctx, &kgo.Record{Value: payload,
		Headers: []kgo.RecordHeader{{Key: keyHeader, Value: []byte(key)}}}).FirstErr()
}

// logged is how many records the run's topic holds: every partition's end
// offset (the harness produces no transactions, so no offset is a control
// record).
func (b *kafkaBroker) logged(ctx context.Context) (int, error) {
	end, err := b.endOffsets(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range end {
		n += int(e)
	}
	return n, nil
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

// close kills every node: the run's directory, with their data, goes
// with the run.
func (b *kafkaBroker) close(context.Context) error {
	if b.cl != nil {
		b.cl.Close()
	}
	for _, n := range b.nodes {
		n.kill()
	}
	return nil
}

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
		// A ledger cut off by a fault fails handlers for as long as the
		// fault lasts: that is no poison. Any poison fails the run
		// (evDead), and is dropped.
		idemkafka.WithMaxAttempts(1000),
		idemkafka.WithDiscardPoison(),
		idemkafka.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))),
		idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
			switch e.Kind {
			case idemkafka.EventDeadLettered, idemkafka.EventDiscarded:
				events.emit(evDead, e.Key, string(e.Reason))
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
		// After a node's crash, a partition's new leader and the group's
		// new coordinator are looked up at once, not 5s later.
		kgo.MetadataMinAge(250 * time.Millisecond),
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
