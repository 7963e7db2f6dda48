package idemamqp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/idemamqp/idemamqptest"
)

// The finding of a hostile-input review: a publisher allowed to publish
// only to the consumer's exchange puts CC (and BCC) on a message; its dead
// letter, published through the default exchange, and a busy delivery's
// copy, published to the delay queue, would be routed by them to any
// queue. Neither carries them live, nor the original's expiration: the
// dead letter keeps them as text under renamed headers.
func TestDeadLetterAndDelayCopyKeepNoSteeringHeader(t *testing.T) {
	t.Parallel()
	q, g, ev := setup(t, idemamqptest.Classic, nil, idem.Config{})
	conn := idemamqptest.Connect(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	// The publisher's exchange routes "orders" to the consumer's queue
	// and nothing else; victim is a queue it may not publish to.
	exchange, victim := q.Name+".orders", q.Name+".victim"
	q.DeleteAtEnd(victim)
	if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(victim, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "orders", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	token := idemamqptest.HoldKey(t, g, "", "busy", "x")
	h := func(context.Context, amqp.Delivery) error { return idem.Permanent(errors.New("card declined")) }
	idemamqptest.Start(t, q, newDeadLettering(t, g, q, ev, h, "", q.DeadLetters))
	steer := amqp.Table{"CC": []any{victim}, "BCC": []any{victim}}
	for _, p := range []amqp.Publishing{
		{Headers: steer, Body: []byte("no key"), Expiration: "600000"},
		{Headers: amqp.Table{"CC": []any{victim}, "BCC": []any{victim}, "idempotency-key": "busy"}, Body: []byte("x"), Expiration: "600000"},
	} {
		if err := ch.PublishWithContext(context.Background(), exchange, "orders", true, false, p); err != nil {
			t.Fatal(err)
		}
	}
	d := q.GetAll(q.DeadLetters, 1, 10*time.Second)[0]
	idemamqptest.Eventually(t, 10*time.Second, "the busy delivery delayed", func() bool { return ev.Kind(idemamqp.EventDelayed) >= 1 })
	if err := g.Store().Release(context.Background(), g.ScopedStoreKey("", "busy"), token); err != nil {
		t.Fatal(err)
	}
	idemamqptest.Eventually(t, 10*time.Second, "the busy delivery's copy dead-lettered", func() bool { return q.Ready(q.DeadLetters) >= 1 })
	if n := q.Ready(victim); n != 0 {
		t.Errorf("%d messages in the queue a dead letter's or a copy's CC named, want 0", n)
	}
	for _, name := range []string{"CC", "BCC"} {
		if v, ok := d.Headers[name]; ok {
			t.Errorf("the dead letter carries %s %v live", name, v)
		}
	}
	// RabbitMQ delivers CC, and takes BCC out.
	if v := d.Headers[consumer.HeaderOriginalPrefix+"CC"]; v != "["+victim+"]" {
		t.Errorf("the dead letter's %s = %#v, want the original's CC as text", consumer.HeaderOriginalPrefix+"CC", v)
	}
	if d.Expiration != "" || d.Headers[consumer.HeaderOriginalPrefix+"expiration"] != "600000" {
		t.Errorf("the dead letter's expiration %q and %s %v, want none and the original's", d.Expiration,
			consumer.HeaderOriginalPrefix+"expiration", d.Headers[consumer.HeaderOriginalPrefix+"expiration"])
	}
}
