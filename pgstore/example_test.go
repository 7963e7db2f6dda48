package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The plain mode: a Guard over a Store. The handler's side effect is
// outside the database (an HTTP call to a payment provider), so the record
// guards it by lease and fencing token.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool, "idem_records"); err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	guard, err := idem.New(store, idem.Config{Namespace: "charges", Wait: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer guard.Close()

	res, err := guard.Do(ctx, "order-1042", []byte(`{"amount":1000}`), func(ctx context.Context) ([]byte, error) {
		return []byte("charge ch_123"), nil // call the provider here
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (replayed: %v)\n", res.Value, res.Replayed)
}

// The transactional mode: the ledger row, the idempotency record and its
// outcome commit together, so the row is written exactly once per key.
func ExampleTxGuard_Do() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	g, err := pgstore.NewTxGuard(pool, idem.Config{Namespace: "ledger"}, pgstore.TxConfig{})
	if err != nil {
		log.Fatal(err)
	}

	res, err := g.Do(ctx, "transfer-77", []byte("alice->bob 10"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO ledger (src, dst, amount) VALUES ('alice', 'bob', 10) RETURNING id`).Scan(&id)
		if err != nil {
			return nil, err // retryable: everything rolls back
		}
		var balance int64
		if err := tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE name = 'alice'`).Scan(&balance); err != nil {
			return nil, err
		}
		if balance < 0 {
			// Stored as the key's outcome; the ledger row is rolled back.
			return nil, idem.Permanent(errors.New("insufficient funds"))
		}
		return fmt.Appendf(nil, "entry %d", id), nil
	})
	var perm *idem.PermanentError
	switch {
	case errors.As(err, &perm):
		fmt.Println("refused:", perm.Err)
	case err != nil:
		log.Fatal(err) // retry later: nothing was committed
	default:
		fmt.Printf("%s (replayed: %v)\n", res.Value, res.Replayed)
	}
}

// DoTx joins the caller's transaction, here a consumer that stores its
// offset with the business write: all of it commits at once.
func ExampleTxGuard_DoTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	g, err := pgstore.NewTxGuard(nil, idem.Config{Namespace: "orders-consumer"}, pgstore.TxConfig{})
	if err != nil {
		log.Fatal(err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := g.DoTx(ctx, tx, "msg-9f1c", []byte("order 42 paid"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			_, err := tx.Exec(ctx, `UPDATE orders SET paid = true WHERE id = 42`)
			return nil, err
		})
		if err != nil && !idem.IsPermanent(err) {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE consumer_offsets SET "offset" = 1001 WHERE partition = 3`)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A Reaper deletes expired records in the background.
func ExampleNewReaper() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool, pgstore.Config{Table: "billing.idem_records"})
	if err != nil {
		log.Fatal(err)
	}
	reaper, err := pgstore.NewReaper(store, pgstore.ReaperConfig{Interval: 5 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer reaper.Close()
	// … serve …
}

// Reap once, from a cron job or an admin command.
func ExampleStore_Reap() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	n, err := store.Reap(ctx, 500)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted", n, "expired records")
}
