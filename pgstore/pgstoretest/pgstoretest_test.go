package pgstoretest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExample(t *testing.T) { testChargeOnce(t) }

func schemaExists(t *testing.T, db pgstore.DB, schema string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestStoresAreIsolatedAndDropped(t *testing.T) {
	pool := pgstoretest.Pool(t, 2)
	var schema string
	t.Run("use", func(t *testing.T) {
		a := pgstoretest.Store(t, pool, pgstore.Config{})
		b := pgstoretest.Store(t, pool, pgstore.Config{})
		if a.Table() == b.Table() || !strings.HasPrefix(a.Table(), `"`+pgstoretest.SchemaPrefix) {
			t.Errorf("tables %s and %s, want two in different %s schemas", a.Table(), b.Table(), pgstoretest.SchemaPrefix)
		}
		schema = strings.Trim(strings.Split(a.Table(), ".")[0], `"`)
		ctx := context.Background()
		c, err := a.Claim(ctx, storage.ClaimArgs{Key: "k", Lease: time.Minute, Retention: time.Hour})
		if err != nil || c.Outcome != storage.Acquired {
			t.Fatalf("Claim: %v %v, want Acquired", c.Outcome, err)
		}
		if _, err := b.Get(ctx, "k"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("another test's store sees the key: Get = %v, want ErrNotFound", err)
		}
		if !schemaExists(t, pool, schema) {
			t.Errorf("schema %s does not exist while its test runs", schema)
		}
	})
	if schema != "" && schemaExists(t, pool, schema) {
		t.Errorf("schema %s is left after its test ended", schema)
	}
}

func TestStoreRefusesATable(t *testing.T) {
	pool := pgstoretest.Pool(t, 1)
	end := testenv.Record(t, func(tb testing.TB) { pgstoretest.Store(tb, pool, pgstore.Config{Table: "mine"}) })
	if !strings.Contains(end.Fatal, "cfg.Table") {
		t.Errorf("Store with a table: failure %q, want one naming cfg.Table", end.Fatal)
	}
}

func TestUnreachableServerSkipsOrFails(t *testing.T) {
	t.Setenv("IDEM_POSTGRES_URL", "postgres://postgres:s3cret@127.0.0.1:1/test?sslmode=disable&connect_timeout=5")
	skip, fatal := testenv.CheckUnreachable(t, "IDEM_POSTGRES_URL", func(tb testing.TB) { pgstoretest.Pool(tb, 1) })
	if !strings.Contains(skip, "127.0.0.1:1") {
		t.Errorf("skip message %q does not name the address", skip)
	}
	if strings.Contains(skip+fatal, "s3cret") {
		t.Errorf("the messages show the password: %q, %q", skip, fatal)
	}
}
