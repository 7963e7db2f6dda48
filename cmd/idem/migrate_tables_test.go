package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/cli/clitest"
	"github.com/idemgo/idem/internal/pgsql"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/storeurl/storeurltest"
)

// TestMigrateEveryTable: one migrate creates the records table, an outbox
// table with its dead rows' table and a kafkapg offsets table, and again
// changes nothing; an outbox table of the previous schema (its first
// migration alone) is upgraded in place, its rows kept.
func TestMigrateEveryTable(t *testing.T) {
	pool := pgstoretest.Pool(t, 2)
	schema := pgstoretest.Schema(t, pool)
	raw := storeurltest.WithParam(t, storeurltest.Server(t, "postgres"), "table", schema+".records")
	ctx := context.Background()
	// The outbox table as the first version created it.
	old, err := pgsql.MigrationScript("outbox", os.DirFS("../../outbox"), "migrations/0001_outbox.sql", 1, map[string]string{
		"table": `"` + schema + `"."old_outbox"`, "pending_idx": `"old_outbox_pending_idx"`, "sent_idx": `"old_outbox_sent_idx"`})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO "`+schema+`"."old_outbox" (message_id, destination, key, key_hash, payload) VALUES ('m', 'd', '', 0, '')`); err != nil {
		t.Fatal(err)
	}
	args := []string{"migrate", "--store", raw, "--outbox", schema + ".outbox", "--outbox", schema + ".old_outbox",
		"--kafka-offsets", schema + ".offsets"}
	for range 2 {
		code, stdout, stderr := clitest.Args(t, run, args...)
		if code != 0 || strings.Count(stdout, "up to date") != 4 {
			t.Fatalf("migrate: exit status %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	}
	for _, table := range []string{"records", "outbox", "outbox_dead", "old_outbox", "old_outbox_dead", "offsets"} {
		var found bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", schema+"."+table).Scan(&found); err != nil || !found {
			t.Errorf("table %s.%s: found %v, %v", schema, table, found, err)
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`"."old_outbox" WHERE next_attempt_at IS NULL`).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("the upgraded outbox table: %d rows with the new column, %v; want its row, upgraded", rows, err)
	}
	code, _, stderr := clitest.Args(t, run, "migrate", "--store", raw, "--outbox", "Bad Name")
	if code == 0 || !strings.Contains(stderr, "Bad Name") {
		t.Errorf("migrate --outbox 'Bad Name': exit status %d, stderr %s; want an error naming it", code, stderr)
	}
}
