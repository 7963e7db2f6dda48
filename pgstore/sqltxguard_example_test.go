package pgstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgstore"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"
)

// Queries stands for what sqlc generates in database/sql mode: queries
// over a DBTX, and WithTx to run them in a transaction.
type Queries struct {
	db interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	}
}

// WithTx returns the Queries in tx, as sqlc's WithTx does.
func (q *Queries) WithTx(tx *sql.Tx) *Queries { return &Queries{db: tx} }

// CreateTransfer inserts a transfer.
func (q *Queries) CreateTransfer(ctx context.Context, id string, cents int64) error {
	_, err := q.db.ExecContext(ctx, "INSERT INTO transfers (id, cents) VALUES ($1, $2)", id, cents)
	return err
}

// The transactional mode for code on database/sql: the transfer row, the
// idempotency record and its outcome commit together.
func ExampleSQLTxGuard_Do() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	queries := &Queries{db: db}
	g, err := pgstore.NewSQLTxGuard(db, idem.Config{Namespace: "transfers"}, pgstore.TxConfig{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := g.Do(ctx, "transfer-9", []byte(`{"cents":500}`), func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		if err := queries.WithTx(tx).CreateTransfer(ctx, "t-9", 500); err != nil {
			return nil, err
		}
		return []byte("t-9"), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (replayed: %v)\n", res.Value, res.Replayed)
}
