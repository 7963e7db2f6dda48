package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// EnqueueSQL in a *sql.Tx: the messages commit with it, in the call's
// order, or not at all; with Notify too.
func TestEnqueueSQLCommitsWithTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, table, _ := newOutbox(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	for _, notify := range []bool{false, true} {
		ob, err := outbox.New(outbox.Config{Table: table, Notify: notify})
		if err != nil {
			t.Fatal(err)
		}
		msgs, _ := outboxtest.Messages(5, 2, "d")
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.EnqueueSQL(ctx, tx, msgs...); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if _, all := outboxtest.Pending(t, pool, table); all != 0 {
			t.Fatalf("notify %v: %d rows after a rollback, want 0", notify, all)
		}
		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.EnqueueSQL(ctx, tx, msgs[0]); err != nil { // one message: the other INSERT
			t.Fatal(err)
		}
		if err := ob.EnqueueSQL(ctx, tx, msgs[1:]...); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		got := outboxtest.RowIDs(t, pool, ob)
		if want := outboxtest.IDs(msgs); !slices.Equal(got, want) {
			t.Fatalf("notify %v: rows %q, want %q in the calls' order", notify, got, want)
		}
		if _, err := pool.Exec(ctx, "DELETE FROM "+ob.Table()); err != nil {
			t.Fatal(err)
		}
	}
	if err := outbox.EnqueueSQL(ctx, nil, outbox.Message{Destination: "d"}); err == nil {
		t.Error("EnqueueSQL with a nil tx: no error")
	}
	var bad outbox.Message // no destination: refused before anything is written
	if err := outbox.EnqueueSQL(ctx, db, bad); !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Errorf("EnqueueSQL of a message without a destination: %v, want ErrInvalidMessage", err)
	}
}

// EnqueueSQL inside pgstore's SQLTxGuard: a message per key, once however
// often the key is retried, and none for a declined one.
func TestEnqueueSQLComposesWithSQLTxGuard(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _, ob := newOutbox(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	g, err := pgstore.NewSQLTxGuard(db, idem.Config{Namespace: "orders"}, pgstore.TxConfig{Table: pgstoretest.Table(t, pool)})
	if err != nil {
		t.Fatal(err)
	}
	order := func(key string, fail bool) (idem.Result, error) {
		return g.Do(ctx, key, []byte("order"), func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			if err := ob.EnqueueSQL(ctx, tx, outbox.Message{ID: "charge-" + key, Destination: "charges", Key: "acct-1"}); err != nil {
				return nil, err
			}
			if fail {
				return nil, idem.Permanent(errors.New("card declined"))
			}
			return []byte("ok"), nil
		})
	}
	for i := range 3 {
		res, err := order("k1", false)
		if err != nil || string(res.Value) != "ok" || res.Replayed != (i > 0) {
			t.Fatalf("attempt %d: %+v, %v; want ok, replayed after the first", i, res, err)
		}
	}
	if _, err := order("k2", true); !idem.IsPermanent(err) {
		t.Fatalf("declined order: %v, want the permanent error", err)
	}
	ids := outboxtest.RowIDs(t, pool, ob)
	if !slices.Equal(ids, []string{"charge-k1"}) {
		t.Errorf("outbox holds %q, want only charge-k1: once for three attempts, none for the declined order", ids)
	}
}
