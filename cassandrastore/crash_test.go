package cassandrastore_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cassandrastore"
	"github.com/idemgo/idem/storage"
)

// TestNodeCrash runs Guards over a Cassandra node of its own (started with
// scripts/cassandra.sh on ports 9142 and 7100), SIGKILLs the node in the
// middle of the load, restarts it on the same files, and finishes the
// load. A ledger counts each key's effects. It checks that every key whose
// effect ran more than once had a run whose outcome write failed during
// the crash (the window of every lease-based store, unfenced), and counts
// the outcomes the store acknowledged that the restarted node no longer
// has. IDEM_CASSANDRA_CRASH_SYNC picks the commit log's sync: with batch
// or group (Cassandra acknowledges a write once its commit log is synced)
// none may be lost; with periodic (services.sh's, Cassandra's default) the
// writes since the last sync are, as the restarted node replays its commit
// log only up to the last sync marker: the test reports how many. It
// starts a second node beside the shared one, so it runs only with
// IDEM_CASSANDRA_CRASH=1:
//
//	IDEM_CASSANDRA_CRASH=1 IDEM_CASSANDRA_CRASH_SYNC=group go test -run TestNodeCrash -v ./cassandrastore
func TestNodeCrash(t *testing.T) {
	if os.Getenv("IDEM_CASSANDRA_CRASH") != "1" {
		t.Skip("starts and kills a Cassandra node of its own: set IDEM_CASSANDRA_CRASH=1")
	}
	n := &node{sync: cmp.Or(os.Getenv("IDEM_CASSANDRA_CRASH_SYNC"), "periodic"), dir: t.TempDir(), port: 9142}
	if commitLog[n.sync] == "" {
		t.Fatalf("IDEM_CASSANDRA_CRASH_SYNC=%s: want periodic, periodic-mmap, group or batch", n.sync)
	}
	t.Logf("commit log: %s", commitLog[n.sync])
	n.start(t)
	t.Cleanup(n.kill)

	cluster := gocql.NewCluster(n.addr())
	cluster.Timeout, cluster.ConnectTimeout = 10*time.Second, 5*time.Second
	cluster.ReconnectionPolicy = &gocql.ConstantReconnectionPolicy{MaxRetries: 1000, Interval: 500 * time.Millisecond}
	cluster.ReconnectInterval = time.Second
	sess, err := cluster.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	cfg := cassandrastore.Config{Keyspace: "crash", MaxClockSkew: 10 * time.Millisecond}
	if err := cassandrastore.Migrate(ctx, sess, cfg, cassandrastore.SimpleStrategy(1)); err != nil {
		t.Fatal(err)
	}
	s, err := cassandrastore.New(sess, cfg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := idem.New(s, idem.Config{Namespace: "crash", Lease: 2 * time.Second, MaxAttempts: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	const keys, workers = 1500, 8
	var (
		mu      sync.Mutex
		effects = map[int]int{}  // runs of each key's operation
		failed  = map[int]bool{} // keys one of whose runs returned an error after it ran
		done    = map[int]bool{} // keys whose outcome the store acknowledged
		pending = make(chan int, keys)
		left    atomic.Int64
		ops     atomic.Int64
	)
	for k := range keys {
		pending <- k
	}
	left.Store(keys)
	crashAt := int64(keys / 3)
	var crashed sync.Once
	var wg sync.WaitGroup
	deadline := time.Now().Add(5 * time.Minute)
	for range workers {
		wg.Go(func() {
			for left.Load() > 0 && time.Now().Before(deadline) {
				var k int
				select {
				case k = <-pending:
				default:
					time.Sleep(50 * time.Millisecond)
					continue
				}
				ran := false
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				_, err := g.Do(cctx, fmt.Sprint("order-", k), []byte("pay"), func(context.Context) ([]byte, error) {
					mu.Lock()
					effects[k]++
					mu.Unlock()
					ran = true
					return []byte("paid"), nil
				})
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					if !done[k] {
						done[k] = true
						left.Add(-1)
					}
				case ran:
					failed[k] = true
				}
				mu.Unlock()
				if err != nil {
					pending <- k // again, once the node is back or the lease is over
					time.Sleep(100 * time.Millisecond)
				}
				if ops.Add(1) == crashAt {
					crashed.Do(func() {
						go func() {
							n.kill()
							t.Logf("node killed after %d operations", crashAt)
							time.Sleep(2 * time.Second)
							n.start(t)
							t.Logf("node restarted")
						}()
					})
				}
			}
		})
	}
	wg.Wait()
	if left.Load() > 0 {
		t.Fatalf("%d keys not done after 5 minutes", left.Load())
	}

	var dup, explained, lost int
	for k := range keys {
		if effects[k] > 1 {
			dup += effects[k] - 1
			if failed[k] {
				explained += effects[k] - 1
			}
		}
		r, err := s.Get(ctx, storage.StoreKey("crash", fmt.Sprint("order-", k)))
		if err != nil || r.Status != storage.StatusCompleted {
			lost++
			if n.sync == "batch" || n.sync == "group" {
				t.Errorf("order-%d: acknowledged, then %+v, %v after the crash", k, r, err)
			}
		}
	}
	t.Logf("commit log %s: %d keys, %d operations, duplicate effects %d (explained by a failed outcome write %d), acknowledged outcomes lost %d",
		n.sync, keys, ops.Load(), dup, explained, lost)
	if dup != explained {
		t.Errorf("%d duplicate effects without a failed run before them", dup-explained)
	}
}

// commitLog holds the commit log settings of each IDEM_CASSANDRA_CRASH_SYNC.
var commitLog = map[string]string{
	"periodic":      "commitlog_sync: periodic\ncommitlog_sync_period: 10000ms",
	"periodic-mmap": "commitlog_sync: periodic\ncommitlog_sync_period: 10000ms\ncommitlog_disk_access_mode: mmap",
	"group":         "commitlog_sync: group\ncommitlog_sync_group_window: 15ms",
	"batch":         "commitlog_sync: batch",
}

// node is a Cassandra process of the test's own.
type node struct {
	sync string // a key of commitLog
	dir  string
	port int
	cmd  *exec.Cmd
	mu   sync.Mutex
}

func (n *node) addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

func (n *node) start(t *testing.T) {
	yaml := fmt.Sprintf(`cluster_name: idem-crash
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
data_file_directories: [%[1]s/data]
commitlog_directory: %[1]s/commitlog
saved_caches_directory: %[1]s/saved_caches
hints_directory: %[1]s/hints
cdc_raw_directory: %[1]s/cdc_raw
%[4]s
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:%[3]d"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: %[3]d
native_transport_port: %[2]d
start_native_transport: true
endpoint_snitch: SimpleSnitch
auto_snapshot: false
write_request_timeout: 5000ms
read_request_timeout: 10000ms
cas_contention_timeout: 5000ms
`, n.dir, n.port, n.port-2042, commitLog[n.sync])
	if err := os.WriteFile(filepath.Join(n.dir, "cassandra.yaml"), []byte(yaml), 0o644); err != nil {
		t.Error(err)
		return
	}
	log, err := os.OpenFile(filepath.Join(n.dir, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Error(err)
		return
	}
	cmd := exec.Command("../scripts/cassandra.sh", "run", n.dir)
	cmd.Env = append(os.Environ(), "CASSANDRA_HEAP_OPTS=-Xms512m -Xmx512m")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Error(err)
		return
	}
	n.mu.Lock()
	n.cmd = cmd
	n.mu.Unlock()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", n.addr(), time.Second); err == nil {
			c.Close()
			return
		}
	}
	t.Error(errors.New("the test's node did not listen within 3 minutes; its log is " + log.Name()))
}

// kill sends the node SIGKILL and waits for it to end.
func (n *node) kill() {
	n.mu.Lock()
	cmd := n.cmd
	n.cmd = nil
	n.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}
