package outboxtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// Poison is a message a broker can never take, for [Broker.Poisons].
type Poison struct {
	// Name names the subtest.
	Name string
	// Message returns the poison message, beside a destination of the
	// test's own (Broker.Destination); its ID and Key are set by the suite.
	Message func(dest string) outbox.Message
	// Err is a text the poison's recorded error must hold: its own error.
	Err string
}

// testPoisons: for each of b.Poisons, a relay round over the poison and 20
// messages of other keys publishes the 20, charges none of them an
// attempt, and moves the poison to the dead rows after one try, with its
// own error. A message of the poison's key enqueued after it waits for it,
// then is published, charged nothing either.
func testPoisons(t *testing.T, b Broker) {
	if len(b.Poisons) == 0 {
		t.Skip("the broker names no message it can never take")
	}
	for _, p := range b.Poisons {
		t.Run(p.Name, func(t *testing.T) { testPoison(t, b, p) })
	}
}

func testPoison(t *testing.T, b Broker, p Poison) {
	dest, got := b.Destination(t)
	run := NewRunID()
	poison := p.Message(dest)
	poison.ID, poison.Key = "poison-"+run, "poison-key"
	msgs := []outbox.Message{poison}
	for i := range 20 {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprintf("innocent-%d-%s", i, run), Destination: dest,
			Key: fmt.Sprintf("key-%d", i), Payload: []byte("x")})
	}
	behind := outbox.Message{ID: "behind-" + run, Destination: dest, Key: poison.Key, Payload: []byte("y")}
	msgs = append(msgs, behind)

	pool := pgstoretest.Pool(t, 4)
	table := Table(t, pool)
	Enqueue(t, pool, table, msgs, 1)
	relay, err := outbox.NewRelay(pool, b.Publisher, outbox.RelayConfig{Table: table, BatchSize: 100, MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	stop := RunRelay(t, relay)
	seen := map[string]bool{}
	for range len(msgs) - 1 {
		seen[receive(t, got).ID] = true
	}
	AwaitPending(t, pool, table, 0)
	stop()
	for _, m := range msgs[1:] {
		if !seen[m.ID] {
			t.Errorf("%s was not published", m.ID)
		}
	}
	if n := Charged(t, pool, table); n > 0 {
		t.Errorf("%d published messages were charged failed attempts, want 0", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	dead, err := outbox.Dead(ctx, pool, table, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Message.ID != poison.ID || dead[0].Attempts != 1 || !strings.Contains(dead[0].LastError, p.Err) {
		t.Errorf("dead rows %+v, want only %s, after 1 attempt, with an error holding %q", dead, poison.ID, p.Err)
	}
}

// Charged returns how many sent rows of table were charged failed
// attempts before they were published.
func Charged(tb testing.TB, pool *pgxpool.Pool, table string) (n int) {
	tb.Helper()
	q := "SELECT count(*) FROM " + quote(table) + " WHERE sent_at IS NOT NULL AND attempts > 0"
	if err := pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		tb.Fatalf("counting charged rows of %s: %v", table, err)
	}
	return n
}
