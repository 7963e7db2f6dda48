package outbox_test

import (
	"errors"
	"testing"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
)

// TestARefusedRowNeverMakesTheRelayWait: the broker refuses one message
// at every attempt. Each refusal charges its row, which waits out its own
// backoff; the relay itself never backs off for it (no OpBackoff), so a
// message of another key enqueued at any time is published at the next
// read, not after a wait that grows with the poison row's failures.
func TestARefusedRowNeverMakesTheRelayWait(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	failIDs(e, "poison", errors.New("refused"))
	outboxtest.Enqueue(t, e.pool, e.table, []outbox.Message{{ID: "poison", Destination: "d", Key: "p"}}, 1)
	cfg := relayConfig(e.table)
	cfg.MaxAttempts = 1000000
	_, ev, _ := e.start(t, cfg)
	for refused := 0; refused < 5; {
		got := ev.await(t, "publish or backoff", func(e outbox.Event) bool { return e.Op == outbox.OpPublish || e.Op == outbox.OpBackoff })
		switch {
		case got.Op == outbox.OpBackoff:
			t.Fatalf("the relay backs off for %v after the broker refused one message (%v): the other keys wait with it", got.Duration, got.Err)
		case got.Sent != 0 || got.Failed != 1 || got.Unavailable != 0:
			t.Fatalf("OpPublish %+v, want the poison message refused alone", got)
		}
		refused++
	}
	good := []string{"good-0", "good-1", "good-2"}
	outboxtest.Enqueue(t, e.pool, e.table, []outbox.Message{
		{ID: good[0], Destination: "d", Key: "a"}, {ID: good[1], Destination: "d", Key: "b"}, {ID: good[2], Destination: "d", Key: "a"},
	}, 1)
	e.rec.AwaitIDs(t, outboxtest.Timeout, good)
	var attempts int
	if err := e.pool.QueryRow(testCtx(t), "SELECT attempts FROM "+quoteTable(e.table)+" WHERE message_id = 'poison' AND sent_at IS NULL").Scan(&attempts); err != nil {
		t.Fatalf("the poison row, pending: %v", err)
	}
	if attempts < 5 {
		t.Errorf("the poison row records %d attempts, want at least the 5 refusals", attempts)
	}
}
