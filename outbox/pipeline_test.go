package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
)

// TestRelayNeverMarksWhatReadingAheadPassed: the relay marks batch k and
// reads batch k+2 while the broker takes batch k+1. When batch k+1 fails
// (all of it, or one key of it), nothing of it is marked, the batch read
// ahead is not published, and once the broker takes it again every
// message arrives, each key's in order, and every row is marked. Only the
// first failed message of a key is charged a failed attempt.
func TestRelayNeverMarksWhatReadingAheadPassed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// fails tells the messages of the second batch that fail;
		// blocked, those that may not reach the broker meanwhile.
		fails, blocked func(i int) bool
	}{
		{"whole batch", func(int) bool { return true }, func(int) bool { return true }},
		{"one key", func(i int) bool { return i%5 == 0 }, func(i int) bool { return i%5 == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const batch, n = 10, 40
			e := newRelayEnv(t)
			msgs, want := outboxtest.Messages(n, 5, "d")
			index := map[string]int{}
			for i, m := range msgs {
				index[m.ID] = i
			}
			ob, err := outbox.New(outbox.Config{Table: e.table})
			if err != nil {
				t.Fatal(err)
			}
			if err := ob.Enqueue(testCtx(t), e.pool, msgs...); err != nil { // one transaction: ids in order
				t.Fatal(err)
			}
			var failing atomic.Bool
			failing.Store(true)
			e.rec.FailWith(func(m outbox.Message) error {
				if i := index[m.ID]; failing.Load() && i >= batch && i < 2*batch && tc.fails(i) {
					return fmt.Errorf("refused %d", i)
				}
				return nil
			})
			cfg := relayConfig(e.table)
			cfg.BatchSize = batch
			e.start(t, cfg)

			// Wait until the failed messages were recorded as such, retried
			// at least twice: by then the batch before was marked with the
			// read that went ahead.
			firstFailed := msgs[batch].ID
			awaitRow(t, e, firstFailed, func(r rowState) bool { return r.attempts >= 2 })
			rows := rowStates(t, e)
			published := map[string]bool{}
			for _, m := range e.rec.Messages() {
				published[m.ID] = true
			}
			charged := map[string]bool{} // keys whose first failed message was seen
			for i, m := range msgs {
				r, blocked := rows[m.ID], i >= batch && tc.blocked(i)
				failed := i >= batch && i < 2*batch && tc.fails(i)
				first := failed && !charged[m.Key]
				if failed {
					charged[m.Key] = true
				}
				switch {
				case r.sent && !published[m.ID]:
					t.Errorf("message %d is marked sent but was never published", i)
				case i < batch && !r.sent:
					t.Errorf("message %d of the first batch is not marked sent", i)
				case blocked && (published[m.ID] || r.sent):
					t.Errorf("message %d reached the broker (marked sent: %v) while an earlier message of its batch or key failed", i, r.sent)
				case first && r.attempts == 0:
					t.Errorf("message %d failed and its row records no attempt", i)
				case failed && !first && r.attempts != 0:
					// It failed behind the first of its key: charging it
					// would kill it for that one's failures.
					t.Errorf("message %d failed behind an earlier message of its key, and its row records %d attempts, want 0", i, r.attempts)
				}
			}

			failing.Store(false)
			e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
			if dups := outboxtest.CheckOrder(t, want, outboxtest.IDs(e.rec.Messages())); dups > 0 {
				t.Errorf("%d duplicates, though no publish of a message both failed and reached the broker", dups)
			}
			outboxtest.AwaitPending(t, e.pool, e.table, 0)
		})
	}
}

type rowState struct {
	sent     bool
	attempts int
}

// rowStates reads the state of every row of e's table, by message ID.
func rowStates(t *testing.T, e *relayEnv) map[string]rowState {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), "SELECT message_id, sent_at IS NOT NULL, attempts FROM "+quoteTable(e.table))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]rowState{}
	for rows.Next() {
		var (
			id string
			r  rowState
		)
		if err := rows.Scan(&id, &r.sent, &r.attempts); err != nil {
			t.Fatal(err)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// awaitRow waits until the row of message id satisfies cond.
func awaitRow(t *testing.T, e *relayEnv, id string, cond func(rowState) bool) {
	t.Helper()
	deadline := time.Now().Add(outboxtest.Timeout)
	for {
		if r, ok := rowStates(t, e)[id]; ok && cond(r) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(errors.New("timed out waiting for the row of " + id))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRelayKeepsTheOrderOfALateCommit: a transaction enqueues the first
// message of a key and stays open while others commit rows with higher
// ids; the relay reads a full batch past it. Then the transaction commits
// and the key's second message is enqueued. The relay, reading ahead,
// must still publish the first message before the second.
func TestRelayKeepsTheOrderOfALateCommit(t *testing.T) {
	t.Parallel()
	const batch = 5
	e := newRelayEnv(t)
	ctx := testCtx(t)
	ob, err := outbox.New(outbox.Config{Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	late, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(context.Background())
	if err := ob.Enqueue(ctx, late, outbox.Message{ID: "first", Destination: "d", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	others, _ := outboxtest.Messages(2*batch, 2*batch, "d")
	if err := ob.Enqueue(ctx, e.pool, others...); err != nil {
		t.Fatal(err)
	}

	// The first batch's publish waits until "first" and "second" are
	// committed: by then the relay has read past "first".
	publishing, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	e.rec.Before(func(ctx context.Context, msgs []outbox.Message) {
		if calls.Add(1) == 1 {
			close(publishing)
			<-release
		}
	})
	cfg := relayConfig(e.table)
	cfg.BatchSize = batch
	e.start(t, cfg)
	select {
	case <-publishing:
	case <-ctx.Done():
		t.Fatal("the relay never published")
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ob.Enqueue(ctx, e.pool, outbox.Message{ID: "second", Destination: "d", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	close(release)

	e.rec.AwaitIDs(t, outboxtest.Timeout, append(outboxtest.IDs(others), "first", "second"))
	var got []string
	for _, m := range e.rec.Messages() {
		if m.Key == "k" {
			got = append(got, m.ID)
		}
	}
	if !slices.Equal(got, []string{"first", "second"}) {
		t.Errorf("key k's messages reached the broker as %q, want [first second]", got)
	}
}
