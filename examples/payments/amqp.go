package main

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/memstore"
)

// amqpOrder is the body of an OrderCreated message.
type amqpOrder struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
}

// amqpReport is what a run of the RabbitMQ example did.
type amqpReport struct {
	published atomic.Int64 // messages, duplicates included
	settled   atomic.Int64 // acked or dead-lettered
	replayed  atomic.Int64
	delayed   atomic.Int64
	dead      atomic.Int64

	mu      sync.Mutex
	charges map[string]int // by order
}

func (r *amqpReport) charge(order string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.charges[order]++
	return r.charges[order]
}

// runAMQP runs the payments example against the RabbitMQ at url: the
// order service publishes OrderCreated events to a queue of the run's
// own, some of them twice (a producer that retried after a lost confirm),
// one of them malformed; two replicas of the payment service charge them
// through idemamqp. Each order is charged once, the second copies are
// acked without a charge, and the malformed order goes to the dead-letter
// queue with its cause. It writes what happens to out and deletes its queues
// at the end. args are its flags (-orders, -dup-rate, -seed).
func runAMQP(ctx context.Context, url string, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("payments (RabbitMQ)", flag.ContinueOnError)
	fs.SetOutput(out)
	orders := fs.Int("orders", 20, "OrderCreated events to publish")
	dupRate := fs.Float64("dup-rate", 0.3, "the chance that an event is published a second time, in [0, 1]")
	seed := fs.Uint64("seed", 1, "the seed of the amounts and duplicates")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *orders < 2 || !(*dupRate >= 0 && *dupRate <= 1) {
		return fmt.Errorf("payments: -orders %d and -dup-rate %v: want at least 2 orders and a rate in [0, 1]", *orders, *dupRate)
	}
	uri, err := amqp.ParseURI(url)
	if err != nil {
		// url.Parse's error quotes the URL, password and all.
		return fmt.Errorf("payments: --broker: %s", strings.ReplaceAll(err.Error(), url, "the URL"))
	}
	out = &amqpLockedWriter{w: out} // the replicas write at once

	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "idem payments example (order service)"}})
	if err != nil {
		return fmt.Errorf("payments: connecting to RabbitMQ at %s:%d: %w", uri.Host, uri.Port, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	// Queues of this run's own, so that runs never see each other's
	// messages; deleted at the end. The consumers publish poison to the
	// dead-letter exchange, with its cause; it is also the queue's own, which
	// receives what the broker itself gives up on (x-delivery-limit).
	name := "payments." + strings.ToLower(crand.Text()[:8])
	queue, dlx, dlq := name+".orders", name+".dlx", name+".dead"
	var consumers []*idemamqp.Consumer
	defer func() {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, c := range consumers {
			ch.QueueDelete(c.DelayQueue(), false, false, false)
		}
		ch.QueueDelete(queue, false, false, false)
		ch.QueueDelete(dlq, false, false, false)
		ch.ExchangeDelete(dlx, false, false)
		ch.Close()
	}()
	if err := ch.ExchangeDeclare(dlx, "fanout", true, false, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.QueueBind(dlq, "", dlx, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{
		"x-queue-type":           "quorum",
		"x-dead-letter-exchange": dlx,
		"x-delivery-limit":       int64(20), // above idem's MaxAttempts: idem's caps fire first
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "RabbitMQ %s:%d: quorum queue %s, dead letters to %s through %s\n", uri.Host, uri.Port, queue, dlq, dlx)

	rep := &amqpReport{charges: map[string]int{}}
	if err := amqpPublish(ctx, ch, queue, uri.Username, *orders, *dupRate, *seed, rep); err != nil {
		return err
	}
	fmt.Fprintf(out, "published %d OrderCreated events for %d orders (one malformed), the duplicates a few events after their first copy\n",
		rep.published.Load(), *orders)

	// Two replicas of the payment service sharing one store.
	store, err := memstore.New(memstore.Config{}) // redisstore or pgstore when the replicas are processes
	if err != nil {
		return err
	}
	defer store.Close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		g, err := idem.New(store, idem.Config{Namespace: "payments", MaxAttempts: 5})
		if err != nil {
			return err
		}
		defer g.Close()
		c, err := idemamqp.New(g, url, queue, amqpCharger(rep, out, r+1),
			// RabbitMQ checks the user-id against the publishing
			// connection's user: a publisher cannot use another's keys.
			idemamqp.WithScope(func(d amqp.Delivery) string { return d.UserId }),
			idemamqp.WithDeadLetter(dlx, ""),
			idemamqp.WithPrefetch(4),
			idemamqp.WithBusyDelay(200*time.Millisecond),
			idemamqp.WithObserver(func(_ context.Context, e idemamqp.Event) {
				switch e.Kind {
				case idemamqp.EventAcked:
					rep.settled.Add(1)
					if e.Replayed {
						rep.replayed.Add(1)
						fmt.Fprintf(out, "  replica %d: %s is a duplicate: acked, not charged again\n", r+1, e.Key)
					}
				case idemamqp.EventDelayed:
					rep.delayed.Add(1)
					fmt.Fprintf(out, "  replica %d: %s is being charged by the other replica: back in %v\n", r+1, e.Key, e.Delay)
				case idemamqp.EventDeadLettered:
					rep.settled.Add(1)
					rep.dead.Add(1)
					fmt.Fprintf(out, "  replica %d: %s dead-lettered (%s): %v\n", r+1, e.Key, e.Reason, e.Err)
				case idemamqp.EventDiscarded: // the dead-letter exchange refused it: rejected to the queue's own
					rep.settled.Add(1)
					rep.dead.Add(1)
					fmt.Fprintf(out, "  replica %d: %s rejected (%s): %v; the dead-letter exchange refused it: %v\n", r+1, e.Key, e.Reason, e.Err, e.BrokerErr)
				}
			}))
		if err != nil {
			return err
		}
		consumers = append(consumers, c)
		wg.Go(func() { errs[r] = c.Run(runCtx) })
	}

	for rep.settled.Load() < rep.published.Load() && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	wg.Wait()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return err
	}

	charges, twice := 0, 0
	for _, n := range rep.charges {
		charges += n
		twice += max(n-1, 0)
	}
	dead, err := ch.QueueDeclarePassive(dlq, true, false, false, false, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d messages for %d orders: %d charged, %d charged twice, %d duplicates acked without a charge, "+
		"%d trips through the delay queue, %d dead-lettered (%d in %s)\n",
		rep.published.Load(), *orders, charges, twice, rep.replayed.Load(), rep.delayed.Load(), rep.dead.Load(), dead.Messages, dlq)
	if twice > 0 || charges != *orders-1 || dead.Messages != 1 {
		return fmt.Errorf("payments: %d charges for %d orders (one malformed), %d twice, %d dead letters", charges, *orders, twice, dead.Messages)
	}
	if d, ok, err := ch.Get(dlq, true); err == nil && ok {
		fmt.Fprintf(out, "the dead letter in %s: %s, reason %v, cause %q\n", dlq, d.Headers[consumer.HeaderKey],
			d.Headers[consumer.HeaderReason], d.Headers[consumer.HeaderCause])
	}
	fmt.Fprintln(out, "OK: every order charged once")
	return nil
}

// amqpPublish publishes the events of n orders to queue as user, with
// publisher confirms: each order's event, and with probability dupRate a
// second copy a few events later; the second order's event is malformed.
func amqpPublish(ctx context.Context, ch *amqp.Channel, queue, user string, n int, dupRate float64, seed uint64, rep *amqpReport) error {
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
		o := amqpOrder{OrderID: fmt.Sprintf("order-%04d", i+1), Customer: fmt.Sprintf("cus_%03d", rng.IntN(1000)), AmountCents: 500 + rng.IntN(20000)}
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
func amqpCharger(rep *amqpReport, out io.Writer, r int) idemamqp.Handler {
	return func(ctx context.Context, d amqp.Delivery) error {
		var o amqpOrder
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

// amqpLockedWriter serialises the writes of the replicas.
type amqpLockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *amqpLockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
