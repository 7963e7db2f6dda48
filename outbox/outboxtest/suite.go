package outboxtest

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// Broker is a publisher under test and the means to read back what it
// published; see [TestPublisher].
type Broker struct {
	// Publisher is the publisher under test.
	Publisher outbox.Publisher

	// Destination returns a destination of t's own, and a channel on which
	// every message published to it arrives, in the broker's order. The
	// reading stops when t ends.
	Destination func(t *testing.T) (string, <-chan Received)

	// Keys is set when Received.Key carries the message key (Kafka's
	// record key): the suite then checks it.
	Keys bool

	// Poisons are messages the broker can never take (see [Poison]):
	// the suite checks that the Publisher fails each as permanent, alone.
	Poisons []Poison
}

// Received is a message as a consumer of the broker sees it.
type Received struct {
	ID      string // where the publisher put Message.ID
	Key     string
	Headers map[string]string // all the broker's headers; the message's must be among them
	Payload []byte
}

// Timeout bounds every wait of the suite.
const Timeout = 30 * time.Second

// TestPublisher runs the behaviour every outbox.Publisher must have
// against a real broker, as parallel subtests; newBroker is called once
// per subtest:
//
//   - every field of a message arrives: the ID where the next hop
//     deduplicates, the headers, the payload byte for byte (empty too);
//   - the messages of a call arrive in order, several calls in a row too;
//   - a Publish with no message does nothing, and one with a cancelled
//     context fails and does not hang;
//   - a Relay over a real outbox table publishes, through it, every
//     enqueued message, each key's in order, and marks them all sent;
//   - a poison message (Broker.Poisons) dies after one try with its own
//     error, and charges no other message an attempt.
func TestPublisher(t *testing.T, newBroker func(t *testing.T) Broker) {
	for _, c := range []struct {
		name string
		test func(t *testing.T, b Broker)
	}{
		{"Fields", testFields},
		{"Order", testOrder},
		{"EmptyAndCancelled", testEmptyAndCancelled},
		{"Relay", testRelay},
		{"Poison", testPoisons},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.test(t, newBroker(t))
		})
	}
}

// testFields: every field of a message arrives.
func testFields(t *testing.T, b Broker) {
	dest, got := b.Destination(t)
	msgs := []outbox.Message{
		{ID: "fields-1-" + NewRunID(), Destination: dest, Key: "k1", Headers: map[string]string{"Trace-Id": "abc", "X-Tenant": "t 1"},
			Payload: []byte("{\"n\":1}")},
		{ID: "fields-2-" + NewRunID(), Destination: dest, Key: "k2", Payload: []byte{0, 1, 2, 0xff, 0}},
		{ID: "fields-3-" + NewRunID(), Destination: dest, Key: "k1", Payload: []byte{}},
	}
	publish(t, b.Publisher, msgs)
	for i, want := range msgs {
		r := receive(t, got)
		if r.ID != want.ID {
			t.Fatalf("message %d: ID %q, want %q", i, r.ID, want.ID)
		}
		if b.Keys && r.Key != want.Key {
			t.Errorf("message %d: key %q, want %q", i, r.Key, want.Key)
		}
		if !bytes.Equal(r.Payload, want.Payload) {
			t.Errorf("message %d: payload %q, want %q", i, r.Payload, want.Payload)
		}
		for name, v := range want.Headers {
			if r.Headers[name] != v {
				t.Errorf("message %d: header %s = %q, want %q (all: %v)", i, name, r.Headers[name], v, r.Headers)
			}
		}
	}
}

// testOrder: the messages of several calls in a row arrive in order.
func testOrder(t *testing.T, b Broker) {
	dest, got := b.Destination(t)
	msgs, want := Messages(300, 7, dest)
	for batch := range slices.Chunk(msgs, 100) {
		publish(t, b.Publisher, batch)
	}
	ids := make([]string, 0, len(msgs))
	for range msgs {
		ids = append(ids, receive(t, got).ID)
	}
	if dups := CheckOrder(t, want, ids); dups > 0 {
		t.Errorf("%d duplicates from calls that all succeeded", dups)
	}
}

// testEmptyAndCancelled: a Publish with no message does nothing, and one
// with a cancelled context fails and does not hang.
func testEmptyAndCancelled(t *testing.T, b Broker) {
	dest, _ := b.Destination(t)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := b.Publisher.Publish(ctx, nil); err != nil {
		t.Errorf("Publish(no message) = %v, want nil", err)
	}
	cancelled, stop := context.WithCancel(ctx)
	stop()
	done := make(chan error, 1)
	go func() {
		done <- b.Publisher.Publish(cancelled, []outbox.Message{{ID: NewRunID(), Destination: dest, Payload: []byte("x")}})
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Publish with a cancelled context returned nil, want an error")
		}
	case <-time.After(Timeout):
		t.Fatal("Publish with a cancelled context did not return")
	}
}

// testRelay: a Relay over a real outbox table publishes every enqueued
// message, each key's in order, and marks them all sent.
func testRelay(t *testing.T, b Broker) {
	dest, got := b.Destination(t)
	pool := pgstoretest.Pool(t, 8)
	table := Table(t, pool)
	msgs, want := Messages(200, 10, dest)
	Enqueue(t, pool, table, msgs, 4)
	relay, err := outbox.NewRelay(pool, b.Publisher, outbox.RelayConfig{Table: table, BatchSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	stop := RunRelay(t, relay)
	ids := make([]string, 0, len(msgs))
	for range msgs {
		ids = append(ids, receive(t, got).ID)
	}
	CheckOrder(t, want, ids)
	AwaitPending(t, pool, table, 0)
	stop()
}

// RunRelay runs relay.Run in a goroutine and returns the function that
// closes it and checks that Run returned nil; it also runs at tb's end.
func RunRelay(tb testing.TB, relay *outbox.Relay) (stop func()) {
	tb.Helper()
	done := make(chan error, 1)
	go func() { done <- relay.Run(context.Background()) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		relay.Close()
		if err := <-done; err != nil {
			tb.Errorf("Relay.Run: %v", err)
		}
	}
	tb.Cleanup(stop)
	return stop
}

// AwaitPending waits until table has n pending rows, or fails tb after
// [Timeout].
func AwaitPending(tb testing.TB, pool *pgxpool.Pool, table string, n int) {
	tb.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		pending, _ := Pending(tb, pool, table)
		if pending == n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s has %d pending rows after %v, want %d", table, pending, Timeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func publish(t *testing.T, p outbox.Publisher, msgs []outbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := p.Publish(ctx, msgs); err != nil {
		t.Fatalf("Publish(%d messages): %v", len(msgs), err)
	}
}

func receive(t *testing.T, got <-chan Received) Received {
	t.Helper()
	select {
	case r, ok := <-got:
		if !ok {
			t.Fatal("the broker's channel closed")
		}
		return r
	case <-time.After(Timeout):
		t.Fatalf("no message within %v", Timeout)
	}
	return Received{}
}
