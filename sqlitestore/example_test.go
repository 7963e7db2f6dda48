package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/sqlitestore"
)

// A Guard over a Store in a file: the outcome outlives the process.
func Example() {
	dir, _ := os.MkdirTemp("", "idem")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	store, err := sqlitestore.Open(ctx, filepath.Join(dir, "idem.db"), sqlitestore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	guard, err := idem.New(store, idem.Config{Namespace: "charges"})
	if err != nil {
		log.Fatal(err)
	}
	defer guard.Close()

	for range 2 {
		res, err := guard.Do(ctx, "order-1042", []byte(`{"amount":1000}`), func(ctx context.Context) ([]byte, error) {
			return []byte("charge ch_123"), nil // call the payment provider here
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (replayed: %v)\n", res.Value, res.Replayed)
	}
	// Output:
	// charge ch_123 (replayed: false)
	// charge ch_123 (replayed: true)
}

// Queries is what sqlc generates for database/sql (emit_methods_with_db_argument
// off): the queries of a schema over a DBTX, and WithTx to run them in a
// transaction. Written by hand here.
type Queries struct{ db DBTX }

// DBTX is sqlc's interface of *sql.DB and *sql.Tx.
type DBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// New returns the Queries of db, as sqlc's New does.
func New(db DBTX) *Queries { return &Queries{db: db} }

// WithTx returns the Queries in tx, as sqlc's WithTx does.
func (q *Queries) WithTx(tx *sql.Tx) *Queries { return &Queries{db: tx} }

// CreateOrder inserts an order.
func (q *Queries) CreateOrder(ctx context.Context, id string, amount int64) error {
	_, err := q.db.ExecContext(ctx, "INSERT INTO orders (id, amount) VALUES (?, ?)", id, amount)
	return err
}

// CountOrders counts the orders.
func (q *Queries) CountOrders(ctx context.Context) (n int64, err error) {
	err = q.db.QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&n)
	return n, err
}

// The transactional mode with sqlc-style code: the order row, the
// idempotency record and its outcome commit together, so a redelivered
// request never inserts the order twice.
func ExampleTxGuard_Do() {
	dir, _ := os.MkdirTemp("", "idem")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	store, err := sqlitestore.Open(ctx, filepath.Join(dir, "app.db"), sqlitestore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := store.DB().ExecContext(ctx, "CREATE TABLE orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	queries := New(store.DB())
	txg, err := sqlitestore.NewTxGuard(store, idem.Config{Namespace: "orders"}, sqlitestore.TxConfig{})
	if err != nil {
		log.Fatal(err)
	}

	for range 2 { // the request, and its retry
		res, err := txg.Do(ctx, "req-7", []byte(`{"amount":1000}`), func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			if err := queries.WithTx(tx).CreateOrder(ctx, "order-7", 1000); err != nil {
				return nil, err
			}
			return []byte("order-7"), nil
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (replayed: %v)\n", res.Value, res.Replayed)
	}
	n, err := queries.CountOrders(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders:", n)
	// Output:
	// order-7 (replayed: false)
	// order-7 (replayed: true)
	// orders: 1
}
