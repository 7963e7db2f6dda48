package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// checkUnavailable calls every method of s and wants each error to wrap
// storage.ErrStoreUnavailable.
func checkUnavailable(t *testing.T, s *pgstore.Store, g *pgstore.TxGuard) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, claimErr := s.Claim(ctx, claimArgs("k", "fp"))
	_, getErr := s.Get(ctx, "k")
	_, batchErr := s.ClaimBatch(ctx, []storage.ClaimArgs{claimArgs("a", "fp"), claimArgs("a", "fp")})
	_, completeBatchErr := s.CompleteBatch(ctx, []storage.Completion{{Key: "k", Token: 1, Retention: time.Hour}})
	_, reapErr := s.Reap(ctx, 0)
	_, doErr := g.Do(ctx, "k", nil, func(context.Context, pgx.Tx) ([]byte, error) { return nil, nil })
	for op, err := range map[string]error{
		"Claim":         claimErr,
		"Complete":      s.Complete(ctx, "k", 1, nil, time.Hour),
		"Fail":          s.Fail(ctx, "k", 1, nil, time.Hour),
		"Release":       s.Release(ctx, "k", 1),
		"Extend":        s.Extend(ctx, "k", 1, time.Minute),
		"Get":           getErr,
		"Delete":        s.Delete(ctx, "k"),
		"ClaimBatch":    batchErr,
		"CompleteBatch": completeBatchErr,
		"Reap":          reapErr,
		"TxGuard.Do":    doErr,
	} {
		if !errors.Is(err, storage.ErrStoreUnavailable) || !strings.HasPrefix(err.Error(), "pgstore: ") {
			t.Errorf("%s: %v, want a pgstore error wrapping ErrStoreUnavailable", op, err)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable&connect_timeout=5", freePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := pgstore.NewTxGuard(pool, idem.Config{}, pgstore.TxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	checkUnavailable(t, s, g)
}

func TestPoolExhausted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	conn, err := e.pool.Acquire(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = e.store.Claim(ctx, claimArgs("k", "fp"))
	if !errors.Is(err, storage.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Claim with the pool exhausted: %v, want ErrStoreUnavailable and the deadline", err)
	}
}

// TestServerStopped runs a throwaway PostgreSQL server of its own (never
// the shared one), stops it, and wants every call to report
// ErrStoreUnavailable.
func TestServerStopped(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	pool, err := pgxpool.New(context.Background(), srv.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgstore.Migrate(testCtx(t), pool, ""); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := pgstore.NewTxGuard(pool, idem.Config{}, pgstore.TxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.Claim(testCtx(t), claimArgs("up", "fp")); err != nil || c.Outcome != storage.Acquired {
		t.Fatalf("Claim while the server is up: %v %v", c.Outcome, err)
	}
	srv.stop(t)
	checkUnavailable(t, s, g)
}

type server struct {
	url    string
	pgCtl  string
	data   string
	asUser []string // runuser prefix when running as root
	stop   func(t *testing.T)
}

// startServer initdb's and starts a PostgreSQL server on a free loopback
// port in a temporary directory, stopped when the test ends. Without the
// server binaries it skips the test, or fails it under
// IDEM_REQUIRE_SERVICES=1.
func startServer(t *testing.T) *server {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		testenv.Unavailable(t, "no /usr/lib/postgresql/*/bin/initdb: cannot start a throwaway server")
	}
	slices.Sort(bins)
	binDir := filepath.Dir(bins[len(bins)-1])
	dir := t.TempDir()
	srv := &server{pgCtl: filepath.Join(binDir, "pg_ctl"), data: filepath.Join(dir, "data")}
	if os.Geteuid() == 0 {
		// initdb and postgres refuse root: run them as the postgres user,
		// who needs to reach and own the directory.
		u, err := user.Lookup("postgres")
		if err != nil {
			testenv.Unavailable(t, "running as root and there is no postgres user to run a throwaway server: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		srv.asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	run := func(name string, args ...string) error {
		argv := append(append(slices.Clone(srv.asUser), name), args...)
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
		return nil
	}
	if err := run(filepath.Join(binDir, "initdb"), "-D", srv.data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"); err != nil {
		t.Fatalf("initdb: %v", err)
	}
	port := freePort(t)
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c shared_buffers=16MB -c max_connections=20", port, dir)
	if err := run(srv.pgCtl, "-D", srv.data, "-l", filepath.Join(dir, "log"), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		t.Fatalf("pg_ctl start: %v", err)
	}
	t.Cleanup(func() { run(srv.pgCtl, "-D", srv.data, "-m", "immediate", "-w", "stop") })
	srv.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", port)
	srv.stop = func(t *testing.T) {
		t.Helper()
		if err := run(srv.pgCtl, "-D", srv.data, "-m", "immediate", "-w", "stop"); err != nil {
			t.Fatalf("pg_ctl stop: %v", err)
		}
	}
	return srv
}
