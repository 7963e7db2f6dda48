package redisstore_test

import (
	"context"
	"crypto/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The package's short names for the helpers of redisstoretest: the shared
// server of IDEM_REDIS_ADDR, skipped without (failed under
// IDEM_REQUIRE_SERVICES=1), and a key prefix per test whose keys are
// deleted when it ends.

func redisAddr() string { return redisstoretest.Addr() }

// sharedClient returns a client of the shared server with hooks added,
// closed when t ends.
func sharedClient(t testing.TB, hooks ...redis.Hook) *redis.Client {
	t.Helper()
	c := redisstoretest.Client(t)
	for _, h := range hooks {
		c.AddHook(h)
	}
	return c
}

// randomPrefix returns a key prefix no other test uses, for benchmarks
// whose keys expire by themselves: deleting them would put load on the
// server that a measurement must not see.
func randomPrefix(testing.TB) string { return redisstoretest.PrefixBase + rand.Text()[:16] + ":" }

// newStore returns a Store over c under cfg.Prefix, or a random prefix;
// its keys are deleted when t ends.
func newStore(t testing.TB, c redis.UniversalClient, cfg redisstore.Config) *redisstore.Store {
	t.Helper()
	return redisstoretest.Store(t, c, cfg)
}

// unavailableService skips the test, or fails it under
// IDEM_REQUIRE_SERVICES=1 (make test).
func unavailableService(t testing.TB, format string, args ...any) {
	t.Helper()
	testenv.Unavailable(t, format, args...)
}

// server is a redis-server of a test's own, on a loopback port, for the
// tests that stop, restart or cluster a server: the shared one is never
// touched.
type server struct {
	t    testing.TB
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// startServer starts redis-server with extra config args ("--name",
// "value", …) on a free port and waits until it answers.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailableService(t, "redisstore: redis-server not found: %v", err)
	}
	s := &server{t: t, port: freePort(t), dir: t.TempDir(), args: append([]string{bin}, args...)}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// start runs the server (again, on the same port and directory) and waits
// until it answers PING.
func (s *server) start() {
	s.t.Helper()
	args := append(append([]string{}, s.args[1:]...), "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	s.cmd = exec.Command(s.args[0], args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s did not answer within 10s; its log:\n%s", s.addr(), log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server, as a crash would, and waits for it to exit.
func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// freePort returns a loopback port that is free, and whose cluster bus
// port (+10000) is free too.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		bus.Close()
		return port
	}
	t.Fatal("no free loopback port pair found")
	return 0
}
