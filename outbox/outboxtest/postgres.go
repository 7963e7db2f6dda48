// Package outboxtest holds what the tests of the outbox, of its publishers
// and of programs built on them share: a PostgreSQL schema per test with a
// migrated outbox table, an in-memory [Recorder] publisher with fault
// injection, [CheckOrder] for per-key order, and [TestPublisher], the
// behaviour every [outbox.Publisher] is held to, run from each publisher's
// tests with one call.
//
// Servers come from environment variables: IDEM_POSTGRES_URL (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable). A test whose
// server cannot be reached is skipped with a message, or fails when
// IDEM_REQUIRE_SERVICES=1 (as under make test).
package outboxtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/outbox"
)

// PostgresURL is the server the tests use: IDEM_POSTGRES_URL or the local
// default.
var PostgresURL = cmp.Or(os.Getenv("IDEM_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")

// Unreachable skips tb because the server named what, at addr, cannot be
// reached (err), or fails it when IDEM_REQUIRE_SERVICES=1.
func Unreachable(tb testing.TB, what, envVar, addr string, err error) {
	tb.Helper()
	if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
		tb.Fatalf("%s at %s (%s) is unreachable and IDEM_REQUIRE_SERVICES=1: %v", what, addr, envVar, err)
	}
	tb.Skipf("%s at %s (%s) is unreachable, skipping: %v", what, addr, envVar, err)
}

// Pool returns a pool of at most maxConns connections to PostgresURL,
// closed when tb ends.
func Pool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(PostgresURL)
	if err != nil {
		tb.Fatalf("IDEM_POSTGRES_URL %q: %v", PostgresURL, err)
	}
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		Unreachable(tb, "PostgreSQL", "IDEM_POSTGRES_URL", PostgresURL, err)
	}
	tb.Cleanup(pool.Close)
	staleOnce.Do(func() { dropStale(tb, pool) })
	return pool
}

// schemaPrefix starts the name of every schema Schema creates.
const schemaPrefix = "outboxtest_"

var staleOnce sync.Once

// Schema creates a schema of tb's own, outboxtest_<unix time>_<random>,
// and drops it, with everything in it, when tb ends.
func Schema(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	name := schemaPrefix + strconv.FormatInt(time.Now().Unix(), 10) + "_" + strings.ToLower(rand.Text()[:10])
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+ident); err != nil {
		tb.Fatalf("CREATE SCHEMA %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			tb.Errorf("DROP SCHEMA %s: %v", name, err)
		}
	})
	return name
}

// Table creates a schema of tb's own (see [Schema]) with a migrated outbox
// table in it, and returns the table's name, schema.outbox.
func Table(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	table := Schema(tb, pool) + ".outbox"
	if err := outbox.Migrate(context.Background(), pool, table); err != nil {
		tb.Fatalf("outbox.Migrate: %v", err)
	}
	return table
}

// dropStale drops the schemas of runs that ended more than an hour ago
// without dropping theirs (a killed test binary).
func dropStale(tb testing.TB, pool *pgxpool.Pool) {
	ctx := context.Background()
	rows, err := pool.Query(ctx, "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", schemaPrefix)
	if err != nil {
		tb.Logf("listing stale test schemas: %v", err)
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Logf("listing stale test schemas: %v", err)
		return
	}
	cutoff := time.Now().Add(-time.Hour).Unix()
	for _, n := range names {
		created, err := strconv.ParseInt(strings.SplitN(strings.TrimPrefix(n, schemaPrefix), "_", 2)[0], 10, 64)
		if err != nil || created > cutoff {
			continue
		}
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err != nil {
			tb.Logf("dropping stale test schema %s: %v", n, err)
		}
	}
}

// Pending returns how many rows of table are not sent yet, and how many
// rows it has in all.
func Pending(tb testing.TB, pool *pgxpool.Pool, table string) (pending, all int) {
	tb.Helper()
	q := fmt.Sprintf("SELECT count(*) FILTER (WHERE sent_at IS NULL), count(*) FROM %s", quote(table))
	if err := pool.QueryRow(context.Background(), q).Scan(&pending, &all); err != nil {
		tb.Fatalf("counting rows of %s: %v", table, err)
	}
	return pending, all
}

// quote quotes a table name given as name or schema.name.
func quote(table string) string { return pgx.Identifier(strings.Split(table, ".")).Sanitize() }
