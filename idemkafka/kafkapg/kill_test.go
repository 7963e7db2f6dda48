package kafkapg_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemkafka/internal/kafkatest"
	"github.com/idemgo/idem/idemkafka/kafkapg"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// The kill test's child process is this test binary, told by these
// environment variables what to consume and when to stop.
const (
	childEnv       = "KAFKAPG_KILL_CHILD" // set: run as a consumer process
	brokersEnv     = "KAFKAPG_KILL_BROKERS"
	schemaEnv      = "KAFKAPG_KILL_SCHEMA"
	killAfterEnv   = "KAFKAPG_KILL_AFTER"  // stop dead after this many commits; 0: never
	expectEnv      = "KAFKAPG_KILL_EXPECT" // ledger ids at which to shut down
	appEnv         = "KAFKAPG_KILL_APP"    // the child's application_name in PostgreSQL
	topicEnv       = "KAFKAPG_KILL_TOPIC"  // the topic the children consume
	groupEnv       = "KAFKAPG_KILL_GROUP"  // and their group
	instanceEnv    = "KAFKAPG_KILL_MEMBER" // the group.instance.id every child takes
	killPartitions = 3
)

// runChild is a consumer process: it consumes into the ledger of the
// parent's schema and reports on stdout where each partition started
// ("start <partition> <offset>") and, at the commit it was told to die
// at, that commit ("committed <partition> <next offset>"), after which it
// stops making progress and waits for its SIGKILL. Kafka commits are
// never made (the interval is an hour): only PostgreSQL knows the offsets.
func runChild() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 2 }
	killAfter, _ := strconv.Atoi(os.Getenv(killAfterEnv))
	expect, _ := strconv.Atoi(os.Getenv(expectEnv))
	schema := os.Getenv(schemaEnv)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(pgstoretest.URL())
	if err != nil {
		return fail(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = os.Getenv(appEnv)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	e := &pgEnv{pool: pool, schema: schema, records: schema + ".idem_records", offsets: schema + ".kafka_offsets", ledger: schema + ".ledger"}

	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	started := map[int32]bool{}
	c, err := kafkapg.New(pool, func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		time.Sleep(time.Millisecond) // the kill lands mid-stream
		return e.record(ctx, tx, r)
	}, kafkapg.WithRecordsTable(e.records), kafkapg.WithOffsetsTable(e.offsets),
		kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithUnkeyedUnguarded(), idemkafka.WithMaxBatch(20),
			idemkafka.WithCommitInterval(time.Hour), idemkafka.WithObserver(func(_ context.Context, ev idemkafka.Event) {
				if ev.Kind == idemkafka.EventBatch {
					out.Lock()
					first := !started[ev.Partition]
					started[ev.Partition] = true
					out.Unlock()
					if first {
						say("start %d %d", ev.Partition, ev.Offset-int64(ev.Records))
					}
				}
			})))
	if err != nil {
		return fail(err)
	}
	var commits int
	var mu sync.Mutex
	kafkapg.SetAfterCommit(c, func(_ string, partition int32, next int64) {
		mu.Lock()
		commits++
		n := commits
		mu.Unlock()
		if n == killAfter {
			say("committed %d %d", partition, next)
			select {} // dead: nothing after the PostgreSQL commit happens, no Kafka commit
		}
	})
	// Every child is the same static member of the group: a restarted child
	// takes its killed predecessor's place at once, where a new member
	// would wait for the dead one's session to time out.
	opts := append(clientOpts(strings.Split(os.Getenv(brokersEnv), ","), os.Getenv(groupEnv), os.Getenv(topicEnv)), kgo.InstanceID(os.Getenv(instanceEnv)))
	cl, err := kgo.NewClient(append(opts, c.ClientOpts()...)...)
	if err != nil {
		return fail(err)
	}
	defer cl.Close()
	runCtx, stop := context.WithCancel(ctx)
	go func() { // shut down gracefully once the ledger is complete
		defer stop()
		for runCtx.Err() == nil {
			var n int
			if err := pool.QueryRow(runCtx, "SELECT count(DISTINCT id) FROM "+e.ledger).Scan(&n); err == nil && expect > 0 && n >= expect {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if err := c.Run(runCtx, cl); err != nil {
		return fail(err)
	}
	return 0
}

// child is one consumer process of the kill test.
type child struct {
	app    string // its application_name in PostgreSQL
	cmd    *exec.Cmd
	lines  <-chan string
	stderr *bytes.Buffer
}

func startChild(t *testing.T, c *kafkatest.Cluster, e *pgEnv, killAfter, expect int) *child {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	app := "kafkapg-kill-" + hex.EncodeToString(b[:])
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", appEnv+"="+app, brokersEnv+"="+strings.Join(c.ListenAddrs(), ","), schemaEnv+"="+e.schema,
		topicEnv+"="+c.Name("orders"), groupEnv+"="+c.Name("payments"), instanceEnv+"="+c.Name("member"),
		killAfterEnv+"="+strconv.Itoa(killAfter), expectEnv+"="+strconv.Itoa(expect))
	ch := &child{app: app, cmd: cmd}
	ch.lines, ch.stderr = testenv.StartLines(t, cmd, 100)
	return ch
}

// gone waits until the server has no session of the killed child left: a
// COMMIT it sent just before its death may still be running there.
func (ch *child) gone(t *testing.T, e *pgEnv) {
	t.Helper()
	kafkatest.Await(t, groupTimeout, "the killed child's sessions to end", func() bool {
		var n int
		err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", ch.app).Scan(&n)
		return err == nil && n == 0
	})
}

// next returns the child's next line that starts with prefix, as fields;
// "start" lines met on the way are added to starts.
func (ch *child) next(t *testing.T, prefix string, starts map[int32]int64) []string {
	t.Helper()
	timeout := time.After(groupTimeout)
	for {
		select {
		case line, ok := <-ch.lines:
			if !ok {
				t.Fatalf("the child exited before a %q line: %v\n%s", prefix, ch.cmd.Wait(), ch.stderr)
			}
			f := strings.Fields(line)
			if len(f) == 3 && f[0] == "start" {
				p, _ := strconv.Atoi(f[1])
				o, _ := strconv.ParseInt(f[2], 10, 64)
				starts[int32(p)] = o
			}
			if f[0] == prefix {
				return f
			}
		case <-timeout:
			t.Fatalf("no %q line from the child within %v\n%s", prefix, groupTimeout, ch.stderr)
		}
	}
}

// stored returns the offsets table's next offset of every partition of
// group on topic (0 where none is stored).
func (e *pgEnv) stored(t *testing.T, group, topic string) map[int32]int64 {
	t.Helper()
	out := map[int32]int64{}
	for p := range int32(killPartitions) {
		next, err := kafkapg.StoredOffset(context.Background(), e.pool, e.offsets, group, topic, p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = max(next, 0)
	}
	return out
}

// The exactly-once mode, killed with SIGKILL between its PostgreSQL commit
// and any Kafka commit, three times, then run to the end: every restart
// starts each partition at the offset PostgreSQL stored, no record is
// handled twice or lost, and the ledger equals the input set. A third of
// the records are unkeyed, exactly-once by the stored offset alone.
func TestKilledBetweenCommits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts consumer processes")
	}
	e := newPG(t)
	c := newCluster(t, map[string]int32{"orders": killPartitions})
	killTopic, killGroup := c.Name("orders"), c.Name("payments")
	recs, ids := orders(killTopic, killPartitions, 600)
	produce(t, c.ListenAddrs(), recs...)

	want := map[int32]int64{0: 0, 1: 0, 2: 0} // where each run must start each partition
	for run, killAfter := range []int{3, 8, 15} {
		ch := startChild(t, c, e, killAfter, len(ids))
		starts := map[int32]int64{}
		f := ch.next(t, "committed", starts)
		if err := ch.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		ch.cmd.Wait()
		ch.gone(t, e)
		t.Logf("run %d: killed after commit %v; started at %v, want %v", run, f[1:], starts, want)
		for p, o := range starts {
			if o != want[p] {
				t.Errorf("run %d started partition %d at %d, want the stored offset %d", run, p, o, want[p])
			}
		}
		p, _ := strconv.Atoi(f[1])
		next, _ := strconv.ParseInt(f[2], 10, 64)
		now := e.stored(t, killGroup, killTopic)
		if now[int32(p)] < next {
			t.Fatalf("run %d: partition %d committed to %d in PostgreSQL, the table says %d", run, p, next, now[int32(p)])
		}
		if commits := c.Committed(killGroup, killTopic); len(commits) > 0 {
			t.Fatalf("run %d: Kafka has commits %v: the kill was to come before any", run, commits)
		}
		want = now
	}
	ch := startChild(t, c, e, 0, len(ids))
	done := make(chan error, 1)
	starts := map[int32]int64{}
	go func() {
		for line := range ch.lines {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "start" {
				p, _ := strconv.Atoi(f[1])
				o, _ := strconv.ParseInt(f[2], 10, 64)
				starts[int32(p)] = o
			}
		}
		done <- ch.cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the last run: %v\n%s", err, ch.stderr)
		}
	case <-time.After(2 * groupTimeout):
		t.Fatalf("the last run did not finish\n%s", ch.stderr)
	}
	t.Logf("last run: started at %v, want %v", starts, want)
	for p, o := range starts {
		if o != want[p] {
			t.Errorf("the last run started partition %d at %d, want the stored offset %d", p, o, want[p])
		}
	}
	e.wantLedger(t, ids)
	e.storedAtEnds(t, c, killGroup, killTopic)
}
