package pgstore_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pgURL is the server the tests use.
var pgURL = cmp.Or(os.Getenv("IDEM_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")

// requireServices makes a missing server a failure instead of a skip.
var requireServices = os.Getenv("IDEM_REQUIRE_SERVICES") == "1"

const schemaPrefix = "idemtest_"

var dropStale sync.Once

// newPool connects to pgURL with at most maxConns connections, closed when
// the test ends. It skips the test when the server is unreachable (fails
// under IDEM_REQUIRE_SERVICES=1).
func newPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(pgURL)
	if err != nil {
		tb.Fatalf("IDEM_POSTGRES_URL %q: %v", pgURL, err)
	}
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		if requireServices {
			tb.Fatalf("PostgreSQL at %s (IDEM_POSTGRES_URL) is unreachable and IDEM_REQUIRE_SERVICES=1: %v", pgURL, err)
		}
		tb.Skipf("PostgreSQL at %s (IDEM_POSTGRES_URL) is unreachable, skipping: %v", pgURL, err)
	}
	tb.Cleanup(pool.Close)
	dropStale.Do(func() { dropStaleSchemas(tb, pool) })
	return pool
}

// newSchema creates a schema of the test's own, named idemtest_<unix
// seconds>_<random>, dropped when the test ends.
func newSchema(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := fmt.Sprintf("%s%d_%s", schemaPrefix, time.Now().Unix(), hex.EncodeToString(b[:]))
	if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// dropStaleSchemas drops the test schemas left over by runs that died more
// than an hour ago.
func dropStaleSchemas(tb testing.TB, pool *pgxpool.Pool) {
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, schemaPrefix)
	if err != nil {
		tb.Fatalf("list schemas: %v", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatalf("list schemas: %v", err)
	}
	for _, n := range names {
		stamp, _, _ := strings.Cut(strings.TrimPrefix(n, schemaPrefix), "_")
		sec, err := strconv.ParseInt(stamp, 10, 64)
		if err != nil || time.Since(time.Unix(sec, 0)) < time.Hour {
			continue
		}
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err != nil {
			tb.Logf("drop stale schema %s: %v", n, err)
		}
	}
}

// env is a test's pool, schema and migrated records table.
type env struct {
	pool   *pgxpool.Pool
	schema string
	table  string // schema.idem_records
	store  *pgstore.Store
}

func newEnv(tb testing.TB, maxConns int32) *env {
	tb.Helper()
	pool := newPool(tb, maxConns)
	schema := newSchema(tb, pool)
	table := schema + ".idem_records"
	if err := pgstore.Migrate(context.Background(), pool, table); err != nil {
		tb.Fatalf("Migrate: %v", err)
	}
	s, err := pgstore.New(pool, pgstore.Config{Table: table})
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return &env{pool: pool, schema: schema, table: table, store: s}
}

// count returns the rows of the records table, expired ones included.
func (e *env) count(tb testing.TB) int {
	tb.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+e.store.Table()).Scan(&n); err != nil {
		tb.Fatalf("count: %v", err)
	}
	return n
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// awaitLockWaiters waits until at least n sessions wait on a lock in a
// statement that names table. It asks through db.
func awaitLockWaiters(t *testing.T, db pgstore.DB, table string, n int) {
	for deadline := time.Now().Add(20 * time.Second); ; {
		var waiting int
		err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0`, table).Scan(&waiting)
		if err != nil {
			t.Errorf("pg_stat_activity: %v", err)
			return
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d sessions wait on a lock of %s, want %d", waiting, table, n)
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
