package pgstoretest

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestStaleSchemasAreDropped(t *testing.T) {
	pool := Pool(t, 1)
	ctx := context.Background()
	now := time.Now()
	stale := fmt.Sprintf("%s%d_%s", SchemaPrefix, now.Add(-2*staleAfter).Unix(), strings.ToLower(rand.Text()[:12]))
	fresh := Schema(t, pool)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+stale) })

	dropStaleSchemas(t, pool, now.Add(-staleAfter))
	for schema, want := range map[string]bool{stale: false, fresh: true} {
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists != want {
			t.Errorf("schema %s exists = %v after dropping the stale ones, want %v", schema, exists, want)
		}
	}
}
