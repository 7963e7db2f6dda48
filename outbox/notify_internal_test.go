package outbox

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestEnqueueNotifiesOnlyWhenAsked: a transaction that enqueues through
// the default Outbox sends no NOTIFY; one through an Outbox with
// Config.Notify sends one at commit. PostgreSQL delivers notifications in
// commit order, so the first one a listener gets after the default
// Enqueue's commit must be the one of the transaction after it.
func TestEnqueueNotifiesOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	ctx, pool, name := migrated(t, "outbox")
	quiet, err := New(Config{Table: name})
	if err != nil {
		t.Fatal(err)
	}
	loud, err := New(Config{Table: name, Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	listener, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{quiet.t.channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	enqueue := func(o *Outbox, id string) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return o.Enqueue(ctx, tx, Message{ID: id, Destination: "d"})
		}); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(quiet, "quiet")
	// A notification with a payload of its own marks the commit order.
	if _, err := pool.Exec(ctx, "SELECT pg_notify($1, 'marker')", quiet.t.channel); err != nil {
		t.Fatal(err)
	}
	enqueue(loud, "loud")
	for i, want := range []string{"marker", ""} {
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("notification %d: %v", i+1, err)
		}
		if n.Payload != want {
			t.Fatalf("notification %d has payload %q, want %q: the default Enqueue notified", i+1, n.Payload, want)
		}
	}
}
