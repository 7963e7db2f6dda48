package outbox_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/internal/pgsql"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// TestARelayStopsOnATableOfThePreviousVersion: a relay started on a table
// created by the first migration alone, not migrated since, stops with an
// error that says to run outbox.Migrate, and publishes nothing; Enqueue
// still writes to such a table, so writers may be upgraded first.
func TestARelayStopsOnATableOfThePreviousVersion(t *testing.T) {
	t.Parallel()
	pool := pgstoretest.Pool(t, 4)
	schema := pgstoretest.Schema(t, pool)
	table := schema + ".outbox"
	ctx := testCtx(t)
	createV1(t, pool, table)
	ob, err := outbox.New(outbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Enqueue(ctx, pool, outbox.Message{ID: "m", Destination: "d"}); err != nil {
		t.Fatalf("Enqueue into a table of the previous version: %v", err)
	}
	rec := outboxtest.NewRecorder()
	r, err := outbox.NewRelay(pool, rec, relayConfig(table))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "outbox.Migrate") {
		t.Errorf("Run on a table of the previous version = %v, want an error naming outbox.Migrate", err)
	}
	if n := len(rec.Messages()); n != 0 {
		t.Errorf("%d messages published from a table the relay cannot keep track of", n)
	}
}

// createV1 creates table as the first version of the package did: its
// first migration alone, rendered as Migrate renders it.
func createV1(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	p, err := pgsql.ParseTable(table)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"table": p.Ident(), "pending_idx": p.Local("_pending_idx"), "sent_idx": p.Local("_sent_idx")}
	script, err := pgsql.MigrationScript("outbox", os.DirFS("."), "migrations/0001_outbox.sql", 1, vars)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), script); err != nil {
		t.Fatal(err)
	}
}
