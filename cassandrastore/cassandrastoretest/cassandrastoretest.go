// Package cassandrastoretest gives tests a [cassandrastore.Store] on the
// Cassandra node of the test machine (started by scripts/services.sh), in
// a keyspace of the test binary's own, created on first use and dropped by
// [Cleanup], so that concurrent runs never see one another's records;
// parallel tests of one binary share it, each under namespaces of its own
// (as idemtest's cases are).
//
// The node's address comes from IDEM_CASSANDRA_ADDR (default
// 127.0.0.1:9042). A node that cannot be reached skips the test, or fails
// it under IDEM_REQUIRE_SERVICES=1 (as make test sets it).
package cassandrastoretest

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/idemgo/idem/cassandrastore"
	"github.com/idemgo/idem/internal/testenv"
)

var server = testenv.Server{Name: "Cassandra", Env: "IDEM_CASSANDRA_ADDR", Default: "127.0.0.1:9042"}

// KeyspacePrefix starts the name of every keyspace [Keyspace] creates:
// idemtest_<unix seconds>_<random>. Test keyspaces older than an hour,
// left by runs that died, are dropped by the first [Session] of a test
// binary.
const KeyspacePrefix = "idemtest_"

// Addr returns the node's address: IDEM_CASSANDRA_ADDR, or 127.0.0.1:9042.
func Addr() string { return server.Addr() }

// NewCluster returns a cluster configuration of [Addr] for tests: no
// automatic retries of a timed-out request, timeouts long enough for a
// node on a loaded 2-core machine.
func NewCluster() *gocql.ClusterConfig {
	c := gocql.NewCluster(Addr())
	c.Timeout = 20 * time.Second
	c.ConnectTimeout = 10 * time.Second
	c.NumConns = 1
	return c
}

var shared struct {
	sync.Mutex
	sess     *gocql.Session
	keyspace string
	err      error
	done     bool
}

// Session returns the test binary's session of [Addr], made on first use
// and closed by [Cleanup]. When the node cannot be reached it skips tb, or
// fails it under IDEM_REQUIRE_SERVICES=1.
func Session(tb testing.TB) *gocql.Session {
	tb.Helper()
	shared.Lock()
	defer shared.Unlock()
	if !shared.done {
		shared.done = true
		shared.sess, shared.err = connect()
	}
	if shared.err != nil {
		server.Unreachable(tb, Addr(), shared.err)
	}
	return shared.sess
}

func connect() (*gocql.Session, error) {
	sess, err := NewCluster().CreateSession()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iter := sess.Query("SELECT keyspace_name FROM system_schema.keyspaces").WithContext(ctx).Iter()
	var name string
	var stale []string
	for iter.Scan(&name) {
		if isStale(name) {
			stale = append(stale, name)
		}
	}
	if err := iter.Close(); err != nil {
		sess.Close()
		return nil, err
	}
	for _, name := range stale {
		sess.Query("DROP KEYSPACE IF EXISTS " + name).WithContext(ctx).Exec()
	}
	return sess, nil
}

func isStale(name string) bool {
	stamp, _, ok := strings.Cut(strings.TrimPrefix(name, KeyspacePrefix), "_")
	sec, err := strconv.ParseInt(stamp, 10, 64)
	return ok && strings.HasPrefix(name, KeyspacePrefix) && err == nil && time.Since(time.Unix(sec, 0)) > time.Hour
}

// Keyspace returns the test binary's keyspace, with the records table
// migrated in it (one replica: SimpleStrategy 1), created on first use.
func Keyspace(tb testing.TB) string {
	tb.Helper()
	sess := Session(tb)
	shared.Lock()
	defer shared.Unlock()
	if shared.keyspace == "" {
		name := fmt.Sprintf("%s%d_%s", KeyspacePrefix, time.Now().Unix(), strings.ToLower(rand.Text()[:12]))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cassandrastore.Migrate(ctx, sess, cassandrastore.Config{Keyspace: name}, cassandrastore.SimpleStrategy(1)); err != nil {
			tb.Fatalf("cassandrastore.Migrate(%s): %v", name, err)
		}
		shared.keyspace = name
	}
	return shared.keyspace
}

// Store returns a Store over the records table of [Keyspace] with cfg
// (whose Keyspace and Table are set to it).
func Store(tb testing.TB, cfg cassandrastore.Config) *cassandrastore.Store {
	tb.Helper()
	cfg.Keyspace, cfg.Table = Keyspace(tb), ""
	s, err := cassandrastore.New(Session(tb), cfg)
	if err != nil {
		tb.Fatalf("cassandrastore.New: %v", err)
	}
	return s
}

// URL returns a cassandra:// URL (see [cassandrastore.ParseURL]) of the
// node at [Addr] naming the test binary's keyspace, with one replica for
// code that migrates from a URL. It skips or fails tb as [Session] does.
func URL(tb testing.TB) string {
	tb.Helper()
	return "cassandra://" + Addr() + "/" + Keyspace(tb) + "?replication=SimpleStrategy:1"
}

// Cleanup drops the test binary's keyspace and closes its session: call it
// from TestMain after m.Run.
func Cleanup() {
	shared.Lock()
	defer shared.Unlock()
	if shared.sess == nil {
		return
	}
	if shared.keyspace != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared.sess.Query("DROP KEYSPACE IF EXISTS " + shared.keyspace).WithContext(ctx).Exec()
		shared.keyspace = ""
	}
	shared.sess.Close()
	shared.sess, shared.done = nil, false
}
