package idemamqp_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os/signal"
	"syscall"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/memstore"
)

// errDeclined stands for a payment provider's refusal.
var errDeclined = errors.New("card declined")

func chargeOrder(ctx context.Context, body []byte) error { return nil }

// A consumer of the queue "orders" that charges each order once, whatever
// the broker redelivers. Run it against a RabbitMQ: it reconnects by
// itself until the process gets SIGTERM.
func Example() {
	store, err := memstore.New(memstore.Config{}) // redisstore or pgstore for several processes
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	g, err := idem.New(store, idem.Config{Namespace: "payments", MaxAttempts: 5})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	charge := func(ctx context.Context, d amqp.Delivery) error {
		err := chargeOrder(ctx, d.Body)
		if errors.Is(err, errDeclined) {
			return idem.Permanent(err) // dead-lettered, and so is every duplicate
		}
		return err // nil: acked; another error: requeued after the retry backoff
	}
	c, err := idemamqp.New(g, "amqp://guest:guest@127.0.0.1:5672/", "orders", charge,
		// RabbitMQ checks the user-id against the publishing connection's
		// user: one publisher cannot use another's keys.
		idemamqp.WithScope(func(d amqp.Delivery) string { return d.UserId }),
		// Poison, with its cause in its headers, goes to the queue
		// "orders.dead" through the default exchange.
		idemamqp.WithDeadLetter("", "orders.dead"),
		idemamqp.WithPrefetch(32))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

func ExampleWithKeyFunc() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	g, err := idem.New(store, idem.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	// Keys from the message-id property; a delivery without one runs
	// without idempotency instead of being poison. Poison is rejected to
	// the queue's own dead-letter exchange.
	c, err := idemamqp.New(g, "amqp://guest:guest@127.0.0.1:5672/", "orders",
		func(context.Context, amqp.Delivery) error { return nil },
		idemamqp.WithKeyFunc(idemamqp.MessageIDKey),
		idemamqp.WithUnkeyedUnguarded(),
		idemamqp.WithSharedScope(),
		idemamqp.WithDiscardPoison())
	fmt.Println(c.DelayQueue(), err)
	// Output: orders.idem-delay.1s <nil>
}
