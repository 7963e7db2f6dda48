package outboxnats_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/natspub"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// natsProcess is a nats-server process of the test's own, with JetStream,
// its store in a directory that outlives the process.
type natsProcess struct {
	port int
	dir  string
	cmd  *exec.Cmd
}

// startNATS starts a nats-server process on a free loopback port with its
// JetStream store in dir, stopped when t ends. It skips t (or fails it,
// under IDEM_REQUIRE_SERVICES=1) when nats-server is not installed.
func startNATS(t *testing.T, dir string) *natsProcess {
	t.Helper()
	if _, err := exec.LookPath("nats-server"); err != nil {
		testenv.Unavailable(t, "nats-server is not installed (apt-get install nats-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &natsProcess{port: l.Addr().(*net.TCPAddr).Port, dir: dir}
	l.Close()
	p.start(t)
	t.Cleanup(p.stop)
	return p
}

func (p *natsProcess) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

// start runs the server and waits until it accepts connections.
func (p *natsProcess) start(t *testing.T) {
	t.Helper()
	p.cmd = exec.Command("nats-server", "-a", "127.0.0.1", "-p", strconv.Itoa(p.port), "-js", "-sd", p.dir)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.port))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server on port %d did not start: %v", p.port, err)
		}
	}
}

// stop shuts the server down gracefully (SIGTERM: its store is synced)
// and waits for it; stopping a stopped server does nothing.
func (p *natsProcess) stop() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
	p.cmd = nil
}

// TestRelaysThroughABrokerRestart: two relays share a table while writers
// enqueue 1,000 messages over 20 keys; in the middle the NATS server stops,
// the relays back off, and it starts again on the same port and store. The
// server is a nats-server process of the test's own, never the shared one.
// The stream ends up with every message, each key's in order, and no row
// died of the outage, though MaxAttempts is 2: the failures of a server
// that is down or restarting count no attempt.
func TestRelaysThroughABrokerRestart(t *testing.T) {
	ns := startNATS(t, t.TempDir()) // stopped last, after the relays and connections
	url := ns.url()

	admin := connect(t, url, nats.ReconnectWait(20*time.Millisecond))
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{Storage: jetstream.FileStorage})
	dest := prefix + ".orders"

	pool := pgstoretest.Pool(t, 12)
	table := outboxtest.Table(t, pool)
	var published, backoffs [2]atomic.Int64
	for i := range 2 {
		pub, err := natspub.New(connect(t, url, nats.ReconnectWait(20*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{
			Table:             table,
			BatchSize:         50,
			RebalanceInterval: 50 * time.Millisecond,
			MinBackoff:        10 * time.Millisecond,
			MaxBackoff:        200 * time.Millisecond,
			MaxAttempts:       2,
			Observer: func(_ context.Context, e outbox.Event) {
				switch e.Op {
				case outbox.OpPublish:
					published[i].Add(int64(e.Sent))
				case outbox.OpBackoff:
					backoffs[i].Add(1)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		outboxtest.RunRelay(t, relay)
	}

	msgs, want := outboxtest.Messages(1000, 20, dest)
	var writers sync.WaitGroup
	writers.Go(func() { outboxtest.Enqueue(t, pool, table, msgs, 8) })

	awaitCond(t, "300 messages published", func() bool { return published[0].Load()+published[1].Load() >= 300 })
	ns.stop()
	awaitCond(t, "both relays backing off", func() bool { return backoffs[0].Load() > 0 && backoffs[1].Load() > 0 })
	ns.start(t)
	writers.Wait()
	outboxtest.AwaitPending(t, pool, table, 0)
	dctx, dcancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer dcancel()
	if dead, err := outbox.Dead(dctx, pool, table, 10); err != nil || len(dead) > 0 {
		t.Fatalf("dead rows after the restart: %+v, %v; want none", dead, err)
	}
	if published[0].Load() == 0 || published[1].Load() == 0 {
		t.Errorf("relays published %d and %d messages, want both to take part", published[0].Load(), published[1].Load())
	}

	got := subscribe(t, admin, stream, dest)
	ids := make([]string, 0, len(msgs))
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer cancel()
	s, err := admin.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for range s.CachedInfo().State.Msgs {
		select {
		case r := <-got:
			ids = append(ids, r.ID)
		case <-ctx.Done():
			t.Fatalf("read %d of %d messages of the stream", len(ids), s.CachedInfo().State.Msgs)
		}
	}
	dups := outboxtest.CheckOrder(t, want, ids)
	t.Logf("stream: %d messages, %d of them duplicates; relays: %d and %d published, %d and %d backoffs",
		len(ids), dups, published[0].Load(), published[1].Load(), backoffs[0].Load(), backoffs[1].Load())
}

// awaitCond waits until cond holds, or fails t after outboxtest.Timeout.
func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(outboxtest.Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, outboxtest.Timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
