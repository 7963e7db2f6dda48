package pgstoretest_test

import (
	"context"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// testChargeOnce is a test of code that keeps its records in PostgreSQL;
// in a test file of your own it would be TestChargeOnce. It runs in
// parallel with every other test: its records table is in a schema of its
// own, dropped when it ends, so the table holds this test's records and
// nothing else.
func testChargeOnce(t *testing.T) {
	t.Parallel()
	pool := pgstoretest.Pool(t, 4) // skips, or fails under IDEM_REQUIRE_SERVICES=1, without a server
	store := pgstoretest.Store(t, pool, pgstore.Config{})
	g, err := idem.New(store, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })

	ctx := context.Background()
	charges := 0
	for range 3 {
		_, err := g.Do(ctx, "order-42", nil, func(context.Context) ([]byte, error) {
			charges++
			return []byte("receipt"), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var records int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+store.Table()).Scan(&records); err != nil {
		t.Fatal(err)
	}
	if charges != 1 || records != 1 {
		t.Errorf("%d charges and %d records, want one of each", charges, records)
	}
}

func Example() {}
