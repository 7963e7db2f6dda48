package outboxkafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem/internal/testenv"
)

// kafkaNode is an Apache Kafka node of a test's own (KRaft, broker and
// controller in one process) on free loopback ports, with its own data
// directory, run by scripts/kafka.sh: the process it starts is the
// broker's JVM, so that kill is a crash of the broker. It is for tests
// that kill a broker; the others share IDEM_KAFKA_BROKERS.
type kafkaNode struct {
	t      *testing.T
	script string // scripts/kafka.sh
	dir    string // server.properties, cluster.id, data/, broker.log
	addr   string // the PLAINTEXT listener, host:port

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// kafkaStartTimeout bounds a node's start: a JVM on a loaded 2-core
// machine, and the recovery of its logs after a crash.
const kafkaStartTimeout = 3 * time.Minute

// startKafkaNode starts a node of t's own and waits until it answers; it
// is killed when t ends. When Apache Kafka is not installed
// (scripts/kafka.sh install) it ends t with [testenv.Unavailable].
func startKafkaNode(t *testing.T) *kafkaNode {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "kafka.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("java"); err != nil {
		testenv.Unavailable(t, "java, which Apache Kafka needs, is not installed: %v", err)
	}
	home, err := exec.Command(script, "home").Output()
	if err != nil {
		testenv.Unavailable(t, "%s home: %v", script, err)
	}
	if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(home)), "installed")); err != nil {
		testenv.Unavailable(t, "Apache Kafka is not installed in %s (scripts/kafka.sh install): %v", strings.TrimSpace(string(home)), err)
	}
	ports := freePorts(t, 2)
	n := &kafkaNode{t: t, script: script, dir: t.TempDir(), addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	props := fmt.Sprintf(`# A Kafka node of one test, written by the test.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:%[2]d
listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[1]d
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=%[3]s
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
`, ports[0], ports[1], filepath.Join(n.dir, "data"))
	if err := os.WriteFile(filepath.Join(n.dir, "server.properties"), []byte(props), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	n.start()
	return n
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// start runs the node (again, after a kill: same ports, same data) and
// waits until it answers a metadata request naming itself.
func (n *kafkaNode) start() {
	n.t.Helper()
	logf, err := os.OpenFile(filepath.Join(n.dir, "broker.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(n.script, "run", n.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A group of its own: the cleanup also ends the format step that runs
	// before the broker when the test ends during it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), kafkaStartTimeout)
	defer cancel()
	for {
		err := n.ping(ctx)
		if err == nil {
			return
		}
		select {
		case <-done:
			n.t.Fatalf("the Kafka node exited before it answered (%v); its log:\n%s", err, n.logTail())
		case <-ctx.Done():
			n.t.Fatalf("the Kafka node did not answer within %v: %v; its log:\n%s", kafkaStartTimeout, err, n.logTail())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ping asks the node for the cluster's metadata and checks it lists the
// node as a broker.
func (n *kafkaNode) ping(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RequestRetries(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if len(resp.Brokers) == 0 {
		return errors.New("metadata lists no broker")
	}
	return nil
}

// kill ends the broker with SIGKILL, a crash: no shutdown, no flush of
// what it holds in memory, and waits until it is gone.
func (n *kafkaNode) kill() {
	n.t.Helper()
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if err := cmd.Process.Kill(); err != nil {
		n.t.Fatalf("kill the Kafka node: %v", err)
	}
	<-done
}

// stop kills the node's process group, if it runs, at the test's end.
func (n *kafkaNode) stop() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
	default:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	if n.t.Failed() {
		n.t.Logf("the Kafka node's log:\n%s", n.logTail())
	}
}

// logTail returns the end of the node's log.
func (n *kafkaNode) logTail() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "broker.log"))
	if len(b) > 8000 {
		b = b[len(b)-8000:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
