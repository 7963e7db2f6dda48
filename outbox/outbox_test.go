package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// newOutbox returns a pool, an outbox table of the test's own and an
// Outbox over it.
func newOutbox(t *testing.T) (*pgxpool.Pool, string, *outbox.Outbox) {
	t.Helper()
	pool := pgstoretest.Pool(t, 8)
	table := outboxtest.Table(t, pool)
	ob, err := outbox.New(outbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return pool, table, ob
}

func TestEnqueueCommitsWithTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, table, ob := newOutbox(t)
	msg := outbox.Message{Destination: "orders", Key: "acct-1", Headers: map[string]string{"Content-Type": "application/json"},
		Payload: []byte(`{"id":1}`)}

	// Rolled back: nothing.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Enqueue(ctx, tx, msg); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, all := outboxtest.Pending(t, pool, table); all != 0 {
		t.Fatalf("%d rows after a rollback, want 0", all)
	}

	// Committed: the row, its ID generated, fields as given.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // the business writes
			return err
		}
		return ob.Enqueue(ctx, tx, msg)
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		id, dest     string
		key, headers []byte
		payload      []byte
		sent         *string
	)
	err = pool.QueryRow(ctx, "SELECT message_id, destination, key, headers, payload, sent_at::text FROM "+ob.Table()).
		Scan(&id, &dest, &key, &headers, &payload, &sent)
	if err != nil {
		t.Fatal(err)
	}
	h, err := outbox.DecodeHeaders(headers)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case len(id) != 26:
		t.Errorf("generated ID %q, want 26 characters", id)
	case dest != msg.Destination || string(key) != msg.Key || !bytes.Equal(payload, msg.Payload) || !maps.Equal(h, msg.Headers):
		t.Errorf("row (%q, %q, %v, %q), want the message's fields", dest, key, h, payload)
	case sent != nil:
		t.Errorf("sent_at %s on a new row, want NULL", *sent)
	}
}

func TestEnqueueRefusesBadMessagesAndWritesNone(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, table, ob := newOutbox(t)
	good := outbox.Message{Destination: "d", Payload: []byte("p")}
	for _, tc := range []struct {
		name  string
		msg   outbox.Message
		field string
	}{
		{"no destination", outbox.Message{}, "Destination"},
		{"destination too long", outbox.Message{Destination: strings.Repeat("d", 256)}, "Destination"},
		{"destination with a newline", outbox.Message{Destination: "a\nb"}, "Destination"},
		{"ID too long", outbox.Message{ID: strings.Repeat("i", 256), Destination: "d"}, "ID"},
		{"ID not UTF-8", outbox.Message{ID: "\xff", Destination: "d"}, "ID"},
		{"ID with NUL", outbox.Message{ID: "a\x00", Destination: "d"}, "ID"},
		{"key too long", outbox.Message{Destination: "d", Key: strings.Repeat("k", outbox.MaxKeyLen+1)}, "Key"},
		{"header name empty", outbox.Message{Destination: "d", Headers: map[string]string{"": "v"}}, "Headers"},
		{"header name with colon", outbox.Message{Destination: "d", Headers: map[string]string{"a:b": "v"}}, "Headers"},
		{"header value with CRLF", outbox.Message{Destination: "d", Headers: map[string]string{"a": "x\r\nInjected: 1"}}, "Headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ob.Enqueue(ctx, pool, good, tc.msg)
			var me *outbox.MessageError
			if !errors.As(err, &me) || !errors.Is(err, outbox.ErrInvalidMessage) {
				t.Fatalf("Enqueue = %v, want a *MessageError wrapping ErrInvalidMessage", err)
			}
			if me.Index != 1 || me.Field != tc.field {
				t.Errorf("MessageError{Index: %d, Field: %q}, want {1, %q}", me.Index, me.Field, tc.field)
			}
		})
	}
	if _, all := outboxtest.Pending(t, pool, table); all != 0 {
		t.Errorf("%d rows written by refused calls, want 0", all)
	}
}

// TestEnqueueRefusesWhatCheckDestinationRefuses: a destination the
// broker's rule (Config.CheckDestination) refuses fails the call with a
// *MessageError wrapping the rule's error, and nothing is written.
func TestEnqueueRefusesWhatCheckDestinationRefuses(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgstoretest.Pool(t, 4)
	table := outboxtest.Table(t, pool)
	errSpace := errors.New("no spaces")
	ob, err := outbox.New(outbox.Config{Table: table, CheckDestination: func(d string) error {
		if strings.Contains(d, " ") {
			return errSpace
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	err = ob.Enqueue(ctx, pool, outbox.Message{Destination: "good"}, outbox.Message{Destination: "a b"})
	me, ok := errors.AsType[*outbox.MessageError](err)
	if !ok || me.Index != 1 || me.Field != "Destination" || !errors.Is(err, outbox.ErrInvalidMessage) || !errors.Is(err, errSpace) {
		t.Fatalf("Enqueue(good, \"a b\") = %v, want a *MessageError of message 1's Destination wrapping ErrInvalidMessage and the check's error", err)
	}
	if err := ob.Enqueue(ctx, pool, outbox.Message{Destination: "good"}); err != nil {
		t.Fatalf("Enqueue(good) = %v", err)
	}
	if _, all := outboxtest.Pending(t, pool, table); all != 1 {
		t.Errorf("%d rows, want only the good message's", all)
	}
}

func TestEnqueueKeepsTheOrderOfOneCall(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _, ob := newOutbox(t)
	msgs, _ := outboxtest.Messages(500, 3, "d")
	if err := ob.Enqueue(ctx, pool, msgs...); err != nil {
		t.Fatal(err)
	}
	got := outboxtest.RowIDs(t, pool, ob)
	if want := outboxtest.IDs(msgs); !slices.Equal(got, want) {
		t.Errorf("ids in id order differ from the call's order (%d rows, want %d)", len(got), len(want))
	}
}

func TestEnqueueFailsOnAMissingTable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgstoretest.Pool(t, 2)
	ob, err := outbox.New(outbox.Config{Table: pgstoretest.Schema(t, pool) + ".nothing"})
	if err != nil {
		t.Fatal(err)
	}
	err = ob.Enqueue(ctx, pool, outbox.Message{Destination: "d"})
	if err == nil || !strings.Contains(err.Error(), "outbox.Migrate") || errors.Is(err, outbox.ErrUnavailable) {
		t.Errorf("Enqueue to a missing table = %v, want an error naming outbox.Migrate, not ErrUnavailable", err)
	}
}

func TestNewAndMigrateRefuseBadTableNames(t *testing.T) {
	for _, name := range []string{"Outbox", "a.b.c", "1abc", "a-b", "a b", `a"b`, strings.Repeat("x", 49), "s.", ".t"} {
		if _, err := outbox.New(outbox.Config{Table: name}); err == nil || !strings.HasPrefix(err.Error(), "outbox: Config.Table") {
			t.Errorf("New(Table %q) = %v, want an error naming Config.Table", name, err)
		}
		if err := outbox.Migrate(context.Background(), nil, name); err == nil {
			t.Errorf("Migrate(%q) = nil, want an error", name)
		}
	}
	for _, name := range []string{"outbox", "s.outbox_2", "_x", strings.Repeat("x", 48), "select"} {
		if _, err := outbox.New(outbox.Config{Table: name}); err != nil {
			t.Errorf("New(Table %q) = %v, want nil", name, err)
		}
	}
}

func TestMigrateIsIdempotentAndSafeConcurrently(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgstoretest.Pool(t, 8)
	table := pgstoretest.Schema(t, pool) + ".box"
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() { errs <- outbox.Migrate(ctx, pool, table) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	if err := outbox.Migrate(ctx, pool, table); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	ob, err := outbox.New(outbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Enqueue(ctx, pool, outbox.Message{Destination: "d"}); err != nil {
		t.Fatalf("Enqueue after Migrate: %v", err)
	}
}

// TestEnqueueComposesWithTxGuard: inside pgstore's TxGuard.DoTx, the
// message commits with the operation's outcome; a retry of the key writes
// no second message; a permanent failure rolls the message back with the
// rest of the operation, and stores the failure.
func TestEnqueueComposesWithTxGuard(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _, ob := newOutbox(t)
	g, err := pgstore.NewTxGuard(pool, idem.Config{Namespace: "orders"}, pgstore.TxConfig{Table: pgstoretest.Table(t, pool)})
	if err != nil {
		t.Fatal(err)
	}
	order := func(key string, fail bool) (idem.Result, error) {
		var res idem.Result
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			res, err = g.DoTxScoped(ctx, tx, "acct-1", key, []byte("order"), func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				if err := ob.Enqueue(ctx, tx, outbox.Message{ID: "charge-" + key, Destination: "charges", Key: "acct-1"}); err != nil {
					return nil, err
				}
				if fail {
					return nil, idem.Permanent(errors.New("card declined"))
				}
				return []byte("ok"), nil
			})
			if idem.IsPermanent(err) {
				return nil // the failure is the key's outcome: commit it
			}
			return err
		})
		return res, err
	}
	for i := range 3 {
		res, err := order("k1", false)
		if err != nil || string(res.Value) != "ok" || res.Replayed != (i > 0) {
			t.Fatalf("attempt %d: %+v, %v; want ok, replayed after the first", i, res, err)
		}
	}
	if _, err := order("k2", true); err != nil {
		t.Fatal(err)
	}
	ids := outboxtest.RowIDs(t, pool, ob)
	if !slices.Equal(ids, []string{"charge-k1"}) {
		t.Errorf("outbox holds %q, want only charge-k1: once for three attempts, none for the declined order", ids)
	}
}
