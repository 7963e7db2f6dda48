package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newPool and newSchema are the package's short names for the helpers
// of pgstoretest: a pool to IDEM_POSTGRES_URL that skips (or fails under
// IDEM_REQUIRE_SERVICES=1) without a server, and a schema of the test's own.
func newPool(tb testing.TB, maxConns int32) *pgxpool.Pool { return pgstoretest.Pool(tb, maxConns) }

func newSchema(tb testing.TB, db pgstore.DB) string { return pgstoretest.Schema(tb, db) }

// env is a test's pool, schema and migrated records table.
type env struct {
	pool   *pgxpool.Pool
	schema string
	table  string // schema.idem_records
	store  *pgstore.Store
}

func newEnv(tb testing.TB, maxConns int32) *env {
	tb.Helper()
	pool := pgstoretest.Pool(tb, maxConns)
	table := pgstoretest.Table(tb, pool)
	schema, _, _ := strings.Cut(table, ".")
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

// storeInTx returns a transaction on e's pool, rolled back when tb ends
// unless committed, and a Store over it on e's table.
func (e *env) storeInTx(tb testing.TB) (pgx.Tx, *pgstore.Store) {
	tb.Helper()
	tx, err := e.pool.Begin(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { tx.Rollback(context.Background()) })
	s, err := pgstore.New(tx, pgstore.Config{Table: e.table})
	if err != nil {
		tb.Fatal(err)
	}
	return tx, s
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
