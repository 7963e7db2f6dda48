package outbox_test

import (
	"os"
	"strings"
	"testing"

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
	v1, err := os.ReadFile("migrations/0001_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	sql := strings.NewReplacer("{table}", `"`+schema+`"."outbox"`, "{pending_idx}", "outbox_pending_idx", "{sent_idx}", "outbox_sent_idx").Replace(string(v1))
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
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
