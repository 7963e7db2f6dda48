package idemnats_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/internal/testenv"
)

// natsProcess is a nats-server process of a test's own, with JetStream in a
// temporary directory, on a free loopback port: the tests that kill a
// server never touch the shared one.
type natsProcess struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	args []string // more of the server's arguments
	cmd  *exec.Cmd
}

// startNATSServer starts a server of the test's own; args are more of its
// arguments.
func startNATSServer(t testing.TB, args ...string) *natsProcess {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nats-server"); serr != nil {
			testenv.Unavailable(t, "idemnats: nats-server not found: %v", err)
		}
		bin = "/usr/sbin/nats-server"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &natsProcess{t: t, bin: bin, port: port, dir: t.TempDir(), args: args}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *natsProcess) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the server (again, on the same port and store directory) and
// waits until its JetStream answers.
func (s *natsProcess) start() {
	s.t.Helper()
	log := filepath.Join(s.dir, "nats.log")
	s.cmd = exec.Command(s.bin, append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js",
		"-sd", filepath.Join(s.dir, "js"), "-l", log}, s.args...)...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting nats-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(s.url(), nats.Timeout(time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
			nc.Close()
			if err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log)
			s.t.Fatalf("nats-server on %s not ready within 10s (%v); its log:\n%s", s.url(), err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill kills the server, as a crash would, and waits for it to exit.
func (s *natsProcess) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// The server is killed in the middle of a run and started again: the
// consumer's connection drops, its fetches fail, acks of messages it
// handled meanwhile may be lost. Once the server is back the consumer goes
// on by itself, and every message has its effect exactly once.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	srv := startNATSServer(t)
	nc, js := connect(t, srv.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0))
	s := newStream(t, js, jetstream.StreamConfig{Storage: jetstream.FileStorage})
	cons := newConsumer(t, s, jetstream.ConsumerConfig{AckWait: time.Second})
	const n = 300
	key := func(i int) string { return fmt.Sprintf("m-%03d", i) }
	for i := range n {
		publish(t, js, subject(s, "jobs"), "job", jetstream.MsgIDHeader, key(i))
	}

	var fx effects
	run(t, newGuard(t, memStore(t), idem.Config{}), cons, func(ctx context.Context, msg jetstream.Msg) error {
		fx.add(msg.Headers().Get(jetstream.MsgIDHeader))
		time.Sleep(time.Millisecond) // some work, so that the restart falls mid-run
		return nil
	}, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithBatchSize(16), idemnats.WithFetchWait(500*time.Millisecond),
		idemnats.WithBusyDelay(50*time.Millisecond), idemnats.WithRetryBackoff(50*time.Millisecond, 50*time.Millisecond))
	waitFor(t, 30*time.Second, "a third of the messages handled", func() bool { return fx.keys() >= n/3 })
	srv.kill()
	handledBefore := fx.keys()
	srv.start()
	waitFor(t, 60*time.Second, "every message handled and acked after the restart", func() bool {
		return fx.keys() == n && drained(t, cons)
	})
	if handledBefore == n {
		t.Fatal("every message was handled before the server went down: the restart was not mid-run")
	}
	if nc.Stats().Reconnects == 0 {
		t.Fatal("the connection never reconnected: the server did not go down under it")
	}
	for i := range n {
		if got := fx.get(key(i)); got != 1 {
			t.Errorf("%s: %d effects, want 1", key(i), got)
		}
	}
}
