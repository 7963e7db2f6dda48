package outboxamqp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/amqppub"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// TestAnExchangeThatDoesNotExistIsPermanent: RabbitMQ closes the channel
// of a publish to an exchange that does not exist (404 NOT_FOUND); the
// messages fail as permanent, and a relay moves their rows to the dead
// rows, publishes nothing more of them and goes on. Once the exchange is
// there, the same Publisher publishes again.
func TestAnExchangeThatDoesNotExistIsPermanent(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := declareQueue(t, conn)
	exchange := "outboxtest.noexchange." + outboxtest.NewRunID()
	pub := newPublisher(t, amqpURL, amqppub.WithExchange(exchange))
	ctx := publishCtx(t)
	err := pub.Publish(ctx, []outbox.Message{{ID: "a", Destination: q, Key: "a"}, {ID: "b", Destination: q, Key: "b"}})
	pe, ok := errors.AsType[*outbox.PublishError](err)
	if !ok || !outbox.IsPermanent(pe.Errs[0]) || !outbox.IsPermanent(pe.Errs[1]) || !errors.Is(pe.Errs[0], amqppub.ErrRefused) {
		t.Fatalf("Publish to a missing exchange = %v, want both messages failed as permanent, ErrRefused", err)
	}

	pool := pgstoretest.Pool(t, 4)
	table := outboxtest.Table(t, pool)
	msgs, _ := outboxtest.Messages(5, 2, q)
	outboxtest.Enqueue(t, pool, table, msgs, 1)
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	stop := outboxtest.RunRelay(t, relay)
	outboxtest.AwaitPending(t, pool, table, 0)
	dead, err := outbox.Dead(ctx, pool, table, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != len(msgs) {
		t.Fatalf("%d dead rows, want %d", len(dead), len(msgs))
	}
	for _, d := range dead {
		if d.Attempts != 1 || !strings.Contains(d.LastError, "NOT_FOUND") {
			t.Errorf("dead row %s: %d attempts, %q; want 1, NOT_FOUND", d.Message.ID, d.Attempts, d.LastError)
		}
	}
	stop()

	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, q, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	got := consume(t, conn, q)
	if err := pub.Publish(ctx, []outbox.Message{{ID: "after", Destination: q}}); err != nil {
		t.Fatalf("Publish once the exchange exists = %v", err)
	}
	select {
	case r := <-got:
		if r.ID != "after" {
			t.Errorf("received %q, want after", r.ID)
		}
	case <-time.After(outboxtest.Timeout):
		t.Fatal("nothing received")
	}
}

// TestPropertiesUpToFrameMaxPass: the Publisher refuses a message whose
// properties would not fit in a frame, and only such a message: of
// messages with headers growing a byte at a time across the connection's
// frame_max, every one it sends is confirmed (a frame too large would
// close the connection), and from some size on it refuses them, as
// permanent, alone.
func TestPropertiesUpToFrameMaxPass(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := declareQueue(t, conn)
	frameMax := conn.Config.FrameSize
	pub := newPublisher(t, amqpURL)
	ctx := publishCtx(t)
	sent, refused := 0, 0
	for n := frameMax - 120; n < frameMax; n++ {
		big := outbox.Message{ID: "id", Destination: q, Key: "a", Headers: map[string]string{"X-Pad": strings.Repeat("p", n)}}
		small := outbox.Message{ID: "small", Destination: q, Key: "b"}
		err := pub.Publish(ctx, []outbox.Message{big, small})
		if err == nil {
			sent++
			continue
		}
		pe, ok := errors.AsType[*outbox.PublishError](err)
		if !ok || !outbox.IsPermanent(pe.Errs[0]) || !errors.Is(pe.Errs[0], amqppub.ErrPropertiesTooLarge) || pe.Errs[1] != nil {
			t.Fatalf("headers of %d bytes: Publish = %v, want nil, or the message refused as too large alone", n, err)
		}
		refused++
	}
	if sent == 0 || refused == 0 {
		t.Errorf("%d sent, %d refused: want the boundary between them", sent, refused)
	}
}
