package outboxtest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/outbox"
)

// Messages returns n messages to dest spread round-robin over keys keys
// (key-0, key-1, …), with IDs unique to the call, and, for each key, its
// messages' IDs in order.
func Messages(n, keys int, dest string) ([]outbox.Message, map[string][]string) {
	run := NewRunID()
	msgs := make([]outbox.Message, n)
	want := map[string][]string{}
	for i := range msgs {
		key := fmt.Sprintf("key-%d", i%keys)
		id := fmt.Sprintf("%s-%d", run, i)
		msgs[i] = outbox.Message{ID: id, Destination: dest, Key: key, Payload: fmt.Appendf(nil, "message %d of %s", i, key)}
		want[key] = append(want[key], id)
	}
	return msgs, want
}

// NewRunID returns a short random string to make names unique to a test.
func NewRunID() string { return outbox.NewID()[:10] }

// Enqueue writes msgs to table with writers goroutines, each committing a
// transaction per message: the messages of a key are all written by one
// writer, in order, so each key's order is defined, while different keys
// commit concurrently.
func Enqueue(tb testing.TB, pool *pgxpool.Pool, table string, msgs []outbox.Message, writers int) {
	tb.Helper()
	ob, err := outbox.New(outbox.Config{Table: table})
	if err != nil {
		tb.Fatal(err)
	}
	byWriter := make([][]outbox.Message, writers)
	slot := map[string]int{}
	for _, m := range msgs {
		w, ok := slot[m.Key]
		if !ok {
			w = len(slot) % writers
			slot[m.Key] = w
		}
		byWriter[w] = append(byWriter[w], m)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for _, mine := range byWriter {
		wg.Go(func() {
			for _, m := range mine {
				err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
					return ob.Enqueue(context.Background(), tx, m)
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatalf("enqueue: %v", err)
	}
}
