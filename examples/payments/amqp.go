package main

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/memstore"
)

// runAMQP runs the payments example against the RabbitMQ at url: the
// order service publishes OrderCreated events to a queue of the run's
// own, some of them twice (a producer that retried after a lost confirm),
// one of them malformed; two replicas of the payment service charge them
// through idemamqp. Each order is charged once, the second copies are
// acked without a charge, and the malformed order goes to the dead-letter
// queue with its cause. It writes what happens to out and deletes its queues
// at the end. args are its flags (-orders, -dup-rate, -seed).
func runAMQP(ctx context.Context, url string, out io.Writer, args []string) error {
	r := &amqpRun{url: url, rep: &queueReport{charges: map[string]int{}}}
	if err := r.parseFlags("payments (RabbitMQ)", "publish", "published", out, args); err != nil {
		return err
	}
	uri, err := amqp.ParseURI(url)
	if err != nil {
		// url.Parse's error quotes the URL, password and all.
		return fmt.Errorf("payments: --broker: %s", strings.ReplaceAll(err.Error(), url, "the URL"))
	}
	r.out = &lockedWriter{w: out} // the replicas write at once

	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "idem payments example (order service)"}})
	if err != nil {
		return fmt.Errorf("payments: connecting to RabbitMQ at %s:%d: %w", uri.Host, uri.Port, err)
	}
	defer conn.Close()
	if r.ch, err = conn.Channel(); err != nil {
		return err
	}
	name := "payments." + strings.ToLower(crand.Text()[:8])
	r.queue, r.dlx, r.dlq = name+".orders", name+".dlx", name+".dead"
	defer r.deleteQueues(conn)
	if err := r.declareQueues(); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "RabbitMQ %s:%d: quorum queue %s, dead letters to %s through %s\n", uri.Host, uri.Port, r.queue, r.dlq, r.dlx)

	if err := amqpPublish(ctx, r.ch, r.queue, uri.Username, r.orders, r.dupRate, r.seed, r.rep); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "published %d OrderCreated events for %d orders (one malformed), the duplicates a few events after their first copy\n",
		r.rep.published.Load(), r.orders)

	start := func(store *memstore.Store, n int) (func(context.Context) error, func(), error) {
		c, closeGuard, err := r.replica(store, n)
		if err != nil {
			return nil, nil, err
		}
		r.consumers = append(r.consumers, c)
		return c.Run, closeGuard, nil
	}
	done := func() bool { return r.rep.settled.Load() >= r.rep.published.Load() }
	if err := runReplicas(ctx, start, nil, done); err != nil {
		return err
	}
	return r.verdict()
}

// amqpRun is one run of the RabbitMQ example.
type amqpRun struct {
	queueFlags      // the flags
	url             string
	out             io.Writer
	ch              *amqp.Channel
	queue, dlx, dlq string
	consumers       []*idemamqp.Consumer
	rep             *queueReport
}

// declareQueues declares the queues of this run's own, so that runs never
// see each other's messages. The consumers publish poison to the
// dead-letter exchange, with its cause; it is also the queue's own, which
// receives what the broker itself gives up on (x-delivery-limit).
func (r *amqpRun) declareQueues() error {
	if err := r.ch.ExchangeDeclare(r.dlx, "fanout", true, false, false, false, nil); err != nil {
		return err
	}
	if _, err := r.ch.QueueDeclare(r.dlq, true, false, false, false, nil); err != nil {
		return err
	}
	if err := r.ch.QueueBind(r.dlq, "", r.dlx, false, nil); err != nil {
		return err
	}
	_, err := r.ch.QueueDeclare(r.queue, true, false, false, false, amqp.Table{
		"x-queue-type":           "quorum",
		"x-dead-letter-exchange": r.dlx,
		"x-delivery-limit":       int64(20), // above idem's MaxAttempts: idem's caps fire first
	})
	return err
}

// deleteQueues deletes the run's queues, the consumers' delay queues and
// the dead-letter exchange, on a channel of its own.
func (r *amqpRun) deleteQueues(conn *amqp.Connection) {
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, c := range r.consumers {
		ch.QueueDelete(c.DelayQueue(), false, false, false)
	}
	ch.QueueDelete(r.queue, false, false, false)
	ch.QueueDelete(r.dlq, false, false, false)
	ch.ExchangeDelete(r.dlx, false, false)
	ch.Close()
}

// replica returns the consumer of replica n of the payment service, over
// store, and the function that closes its Guard.
func (r *amqpRun) replica(store *memstore.Store, n int) (*idemamqp.Consumer, func(), error) {
	g, err := idem.New(store, idem.Config{Namespace: "payments", MaxAttempts: 5})
	if err != nil {
		return nil, nil, err
	}
	c, err := idemamqp.New(g, r.url, r.queue, amqpCharger(r.rep, r.out, n),
		// RabbitMQ checks the user-id against the publishing
		// connection's user: a publisher cannot use another's keys.
		idemamqp.WithScope(func(d amqp.Delivery) string { return d.UserId }),
		idemamqp.WithDeadLetter(r.dlx, ""),
		idemamqp.WithPrefetch(4),
		idemamqp.WithBusyDelay(200*time.Millisecond),
		idemamqp.WithObserver(r.observe(n)))
	if err != nil {
		g.Close()
		return nil, nil, err
	}
	return c, func() { g.Close() }, nil
}

// observe counts and tells what replica n's consumer did with a delivery.
func (r *amqpRun) observe(n int) func(context.Context, idemamqp.Event) {
	rep, out := r.rep, r.out
	return func(_ context.Context, e idemamqp.Event) {
		switch e.Kind {
		case idemamqp.EventAcked:
			rep.settled.Add(1)
			if e.Replayed {
				rep.replayed.Add(1)
				fmt.Fprintf(out, "  replica %d: %s is a duplicate: acked, not charged again\n", n, e.Key)
			}
		case idemamqp.EventDelayed:
			rep.delayed.Add(1)
			fmt.Fprintf(out, "  replica %d: %s is being charged by the other replica: back in %v\n", n, e.Key, e.Delay)
		case idemamqp.EventDeadLettered:
			rep.settled.Add(1)
			rep.dead.Add(1)
			fmt.Fprintf(out, "  replica %d: %s dead-lettered (%s): %v\n", n, e.Key, e.Reason, e.Err)
		case idemamqp.EventDiscarded: // the dead-letter exchange refused it: rejected to the queue's own
			rep.settled.Add(1)
			rep.dead.Add(1)
			fmt.Fprintf(out, "  replica %d: %s rejected (%s): %v; the dead-letter exchange refused it: %v\n", n, e.Key, e.Reason, e.Err, e.BrokerErr)
		}
	}
}

// verdict writes what the run charged and what the dead-letter queue
// holds, and fails if an order was charged twice or not at all.
func (r *amqpRun) verdict() error {
	rep := r.rep
	charges, twice := rep.totals()
	dead, err := r.ch.QueueDeclarePassive(r.dlq, true, false, false, false, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "\n%d messages for %d orders: %d charged, %d charged twice, %d duplicates acked without a charge, "+
		"%d trips through the delay queue, %d dead-lettered (%d in %s)\n",
		rep.published.Load(), r.orders, charges, twice, rep.replayed.Load(), rep.delayed.Load(), rep.dead.Load(), dead.Messages, r.dlq)
	if twice > 0 || charges != r.orders-1 || dead.Messages != 1 {
		return fmt.Errorf("payments: %d charges for %d orders (one malformed), %d twice, %d dead letters", charges, r.orders, twice, dead.Messages)
	}
	if d, ok, err := r.ch.Get(r.dlq, true); err == nil && ok {
		fmt.Fprintf(r.out, "the dead letter in %s: %s, reason %v, cause %q\n", r.dlq, d.Headers[consumer.HeaderKey],
			d.Headers[consumer.HeaderReason], d.Headers[consumer.HeaderCause])
	}
	fmt.Fprintln(r.out, "OK: every order charged once")
	return nil
}

// amqpPublish publishes the events of n orders to queue as user, with
// publisher confirms: each order's event, and with probability dupRate a
// second copy a few events later; the second order's event is malformed.
func amqpPublish(ctx context.Context, ch *amqp.Channel, queue, user string, n int, dupRate float64, seed uint64, rep *queueReport) error {
	if err := ch.Confirm(false); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, 0xa39))
	var later []amqp.Publishing
	var confs []*amqp.DeferredConfirmation
	publish := func(p amqp.Publishing) error {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
		if err != nil {
			return err
		}
		confs = append(confs, c)
		rep.published.Add(1)
		return nil
	}
	for i := range n {
		o := queueOrder{OrderID: fmt.Sprintf("order-%04d", i+1), Customer: fmt.Sprintf("cus_%03d", rng.IntN(1000)), AmountCents: 500 + rng.IntN(20000)}
		body, _ := json.Marshal(o)
		if i == 1 {
			body = []byte(`{"order_id": "order-0002", "amount_cents": "twelve"}`) // poison
		}
		p := amqp.Publishing{
			Headers:      amqp.Table{idemamqp.DefaultKeyHeader: o.OrderID},
			UserId:       user,
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			Type:         "OrderCreated",
			Body:         body,
		}
		if err := publish(p); err != nil {
			return err
		}
		if len(later) > 0 && rng.IntN(2) == 0 {
			if err := publish(later[0]); err != nil {
				return err
			}
			later = later[1:]
		}
		if rng.Float64() < dupRate {
			later = append(later, p)
		}
	}
	for _, p := range later {
		if err := publish(p); err != nil {
			return err
		}
	}
	for _, c := range confs {
		if ok, err := c.WaitContext(ctx); !ok || err != nil {
			return fmt.Errorf("payments: the broker did not confirm an event: %v", err)
		}
	}
	return nil
}

// amqpCharger is the payment service's handler in replica r: it charges
// the order, or refuses a malformed event for good.
func amqpCharger(rep *queueReport, out io.Writer, r int) idemamqp.Handler {
	return func(ctx context.Context, d amqp.Delivery) error {
		var o queueOrder
		if err := json.Unmarshal(d.Body, &o); err != nil {
			return idem.Permanent(fmt.Errorf("not an OrderCreated event: %w", err))
		}
		time.Sleep(20 * time.Millisecond) // the payment provider's round trip
		n := rep.charge(o.OrderID)
		fmt.Fprintf(out, "  replica %d: charged %s %d.%02d EUR to %s (charge #%d of this order)\n",
			r, o.OrderID, o.AmountCents/100, o.AmountCents%100, o.Customer, n)
		return nil
	}
}
