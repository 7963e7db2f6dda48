package pgstoretest

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/pgstore"
)

// server is the PostgreSQL server of the tests.
var server = testenv.Server{
	Name:    "PostgreSQL",
	Env:     "IDEM_POSTGRES_URL",
	Default: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
}

// SchemaPrefix starts the name of every schema [Schema] creates.
const SchemaPrefix = "idemtest_"

// staleAfter is the age from which a test schema is taken for one that a
// killed run left behind.
const staleAfter = time.Hour

// connectTimeout bounds connecting and the first ping; setupTimeout the
// statements that create, migrate or drop a test's schema.
const (
	connectTimeout = 5 * time.Second
	setupTimeout   = 30 * time.Second
)

// URL returns the URL of the PostgreSQL server the tests use: the value of
// IDEM_POSTGRES_URL, or postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
func URL() string { return server.Addr() }

// Pool returns a pool of at most maxConns connections (pgxpool's default
// when 0) to the server at [URL], closed when tb ends. When the server
// cannot be reached it skips tb, or fails it under IDEM_REQUIRE_SERVICES=1.
func Pool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	url := URL()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("pgstoretest: %s is not a PostgreSQL URL: %v", server.Env, err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		server.Unreachable(tb, redacted(cfg), err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// redacted names the server of cfg without its password.
func redacted(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("postgres://%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}

var dropStale sync.Once

// Schema creates an empty schema of tb's own through db and returns its
// name, idemtest_<unix seconds>_<random>: lowercase letters, digits and
// underscores, so it needs no quoting. The schema and everything in it are
// dropped when tb ends, through db, which must stay open until then (a
// [Pool] made before Schema is closed after it). The first call of the
// process drops the test schemas more than an hour old.
func Schema(tb testing.TB, db pgstore.DB) string {
	tb.Helper()
	dropStale.Do(func() { dropStaleSchemas(tb, db, time.Now().Add(-staleAfter)) })
	name := SchemaPrefix + strconv.FormatInt(time.Now().Unix(), 10) + "_" + strings.ToLower(rand.Text()[:12])
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if _, err := db.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("pgstoretest: creating schema %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if _, err := db.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			tb.Errorf("pgstoretest: dropping the test's schema %s: %v", name, err)
		}
	})
	return name
}

// Table returns a records table of tb's own, <schema>.idem_records in a
// new [Schema], created by [pgstore.Migrate] through db.
func Table(tb testing.TB, db pgstore.DB) string {
	tb.Helper()
	table := Schema(tb, db) + "." + pgstore.DefaultTable
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := pgstore.Migrate(ctx, db, table); err != nil {
		tb.Fatalf("pgstoretest: pgstore.Migrate(%s): %v", table, err)
	}
	return table
}

// Store returns a store over db whose records table is a [Table] of tb's
// own; cfg's other fields are passed on to [pgstore.New]. cfg.Table must be
// empty.
func Store(tb testing.TB, db pgstore.DB, cfg pgstore.Config) *pgstore.Store {
	tb.Helper()
	if cfg.Table != "" {
		tb.Fatalf("pgstoretest: Store: cfg.Table is %q; leave it empty, the store's table is the test's own", cfg.Table)
	}
	cfg.Table = Table(tb, db)
	s, err := pgstore.New(db, cfg)
	if err != nil {
		tb.Fatalf("pgstoretest: pgstore.New: %v", err)
	}
	return s
}

// dropStaleSchemas drops the test schemas created before cutoff, as their
// names say. A failure is only logged: it leaves garbage, not a wrong
// result.
func dropStaleSchemas(tb testing.TB, db pgstore.DB, cutoff time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	rows, err := db.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, SchemaPrefix)
	if err != nil {
		tb.Logf("pgstoretest: listing stale test schemas: %v", err)
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Logf("pgstoretest: listing stale test schemas: %v", err)
		return
	}
	for _, n := range names {
		stamp, _, _ := strings.Cut(strings.TrimPrefix(n, SchemaPrefix), "_")
		sec, err := strconv.ParseInt(stamp, 10, 64)
		if err != nil || !time.Unix(sec, 0).Before(cutoff) {
			continue
		}
		if _, err := db.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err != nil {
			tb.Logf("pgstoretest: dropping stale test schema %s: %v", n, err)
		}
	}
}
