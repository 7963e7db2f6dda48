package main

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemsqs"
	"github.com/idemgo/idem/memstore"
)

func isSQS(broker string) bool { return strings.HasPrefix(broker, "sqs://") }

// runSQS runs the payments example against the SQS endpoint of broker,
// sqs://host:port (an SQS-compatible server such as moto's, over HTTP;
// sqs+https://… for TLS), with the credentials of AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (dummy ones by default, which a local server
// takes) in AWS_REGION (us-east-1): the order service sends OrderCreated
// events to a queue of the run's own, some of them twice (a producer that
// retried after a lost answer), one of them malformed; two replicas of
// the payment service charge them through idemsqs, with a visibility
// timeout of 2s shorter than some charges. Each order is charged once,
// the second copies are deleted without a charge, and the malformed order
// goes to the dead-letter queue with its cause. It writes what happens to
// out and deletes its queues at the end. args are its flags (-orders,
// -dup-rate, -seed).
func runSQS(ctx context.Context, broker string, out io.Writer, args []string) error {
	r := &sqsRun{rep: &queueReport{charges: map[string]int{}}}
	if err := r.parseFlags("payments (SQS)", "send", "sent", out, args); err != nil {
		return err
	}
	u, err := url.Parse(broker)
	if err != nil || u.Host == "" {
		return fmt.Errorf("payments: --broker %q: want sqs://host:port", broker)
	}
	r.out = &lockedWriter{w: out}
	// A transport of the run's own, its idle connections closed at the end:
	// the run leaves no goroutine behind.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	r.client = sqs.New(sqs.Options{
		HTTPClient:   &http.Client{Transport: tr},
		Region:       envOr("AWS_REGION", "us-east-1"),
		BaseEndpoint: aws.String("http://" + u.Host),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: envOr("AWS_ACCESS_KEY_ID", "idem"), SecretAccessKey: envOr("AWS_SECRET_ACCESS_KEY", "idem")}, nil
		}),
	})
	name := "payments-" + strings.ToLower(crand.Text()[:8])
	defer r.deleteQueues()
	if r.dlq, err = r.createQueue(ctx, name+"-dead", nil); err != nil {
		return fmt.Errorf("payments: SQS at %s: %w", u.Host, err)
	}
	// A visibility timeout shorter than the slowest charges: idemsqs keeps
	// the messages invisible while they are charged.
	if r.queue, err = r.createQueue(ctx, name+"-orders", map[string]string{"VisibilityTimeout": "2"}); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "SQS %s: queue %s (visibility timeout 2s), dead letters to %s\n", u.Host, r.queue, r.dlq)
	if err := r.publish(ctx); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "sent %d OrderCreated events for %d orders (one malformed), the duplicates a few events after their first copy\n",
		r.rep.published.Load(), r.orders)

	start := func(store *memstore.Store, n int) (func(context.Context) error, func(), error) {
		return r.replica(store, n)
	}
	done := func() bool { return r.rep.settled.Load() >= r.rep.published.Load() }
	if err := runReplicas(ctx, start, nil, done); err != nil {
		return err
	}
	return r.verdict(ctx)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// sqsRun is one run of the SQS example.
type sqsRun struct {
	queueFlags // the flags
	out        io.Writer
	client     *sqs.Client
	queue, dlq string
	rep        *queueReport
}

// createQueue creates the queue name of this run's own, so that runs
// never see each other's messages, and returns its URL.
func (r *sqsRun) createQueue(ctx context.Context, name string, attrs map[string]string) (string, error) {
	out, err := r.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueUrl), nil
}

func (r *sqsRun) deleteQueues() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range []string{r.queue, r.dlq} {
		if q != "" {
			r.client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q)})
		}
	}
}

// replica returns replica n of the payment service, over store: its Run
// and the function that closes its Guard.
func (r *sqsRun) replica(store *memstore.Store, n int) (func(context.Context) error, func(), error) {
	g, err := idem.New(store, idem.Config{Namespace: "payments", MaxAttempts: 5})
	if err != nil {
		return nil, nil, err
	}
	c, err := idemsqs.New(g, r.client, r.queue, sqsCharger(r.rep, r.out, n),
		// The order service assigns the order IDs: one key space.
		idemsqs.WithSharedScope(),
		idemsqs.WithDeadLetter(r.dlq),
		idemsqs.WithConcurrency(4),
		idemsqs.WithWaitTime(time.Second),
		idemsqs.WithBusyDelay(time.Second),
		idemsqs.WithObserver(r.observe(n)))
	if err != nil {
		g.Close()
		return nil, nil, err
	}
	return c.Run, func() { g.Close() }, nil
}

// observe counts and tells what replica n's consumer did with a message.
func (r *sqsRun) observe(n int) func(context.Context, idemsqs.Event) {
	rep, out := r.rep, r.out
	return func(_ context.Context, e idemsqs.Event) {
		switch e.Kind {
		case idemsqs.EventDeleted:
			rep.settled.Add(1)
			if e.Replayed {
				rep.replayed.Add(1)
				fmt.Fprintf(out, "  replica %d: %s is a duplicate: deleted, not charged again\n", n, e.Key)
			}
		case idemsqs.EventDelayed:
			rep.delayed.Add(1)
			fmt.Fprintf(out, "  replica %d: %s is being charged by the other replica: visible again in %v\n", n, e.Key, e.Delay)
		case idemsqs.EventDeadLettered, idemsqs.EventDiscarded:
			rep.settled.Add(1)
			rep.dead.Add(1)
			fmt.Fprintf(out, "  replica %d: %s %s (%s): %v\n", n, e.Key, e.Kind, e.Reason, e.Err)
		}
	}
}

// verdict writes what the run charged and what the dead-letter queue
// holds, and fails if an order was charged twice or not at all.
func (r *sqsRun) verdict(ctx context.Context) error {
	rep := r.rep
	charges, twice := rep.totals()
	// A long poll of a few seconds: a server may answer one receive empty
	// while it holds a message.
	got, err := r.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(r.dlq), MaxNumberOfMessages: 10,
		WaitTimeSeconds: 5, MessageAttributeNames: []string{"All"}})
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "\n%d messages for %d orders: %d charged, %d charged twice, %d duplicates deleted without a charge, "+
		"%d made visible again while busy, %d dead-lettered (%d in %s)\n",
		rep.published.Load(), r.orders, charges, twice, rep.replayed.Load(), rep.delayed.Load(), rep.dead.Load(), len(got.Messages), r.dlq)
	if twice > 0 || charges != r.orders-1 || len(got.Messages) != 1 {
		return fmt.Errorf("payments: %d charges for %d orders (one malformed), %d twice, %d dead letters", charges, r.orders, twice, len(got.Messages))
	}
	a := got.Messages[0].MessageAttributes
	fmt.Fprintf(r.out, "the dead letter in %s: %s, reason %s, cause %q\n", r.dlq, aws.ToString(a[consumer.HeaderKey].StringValue),
		aws.ToString(a[consumer.HeaderReason].StringValue), aws.ToString(a[consumer.HeaderCause].StringValue))
	fmt.Fprintln(r.out, "OK: every order charged once")
	return nil
}

// publish sends the events of the run's orders: each order's event, and
// with probability dupRate a second copy a few events later; the second
// order's event is malformed.
func (r *sqsRun) publish(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(r.seed, 0x5a5))
	var later []*sqs.SendMessageInput
	send := func(in *sqs.SendMessageInput) error {
		if _, err := r.client.SendMessage(ctx, in); err != nil {
			return err
		}
		r.rep.published.Add(1)
		return nil
	}
	for i := range r.orders {
		o := queueOrder{OrderID: fmt.Sprintf("order-%04d", i+1), Customer: fmt.Sprintf("cus_%03d", rng.IntN(1000)), AmountCents: 500 + rng.IntN(20000)}
		body, _ := json.Marshal(o)
		if i == 1 {
			body = []byte(`{"order_id": "order-0002", "amount_cents": "twelve"}`) // poison
		}
		in := &sqs.SendMessageInput{QueueUrl: aws.String(r.queue), MessageBody: aws.String(string(body)),
			MessageAttributes: map[string]types.MessageAttributeValue{
				idemsqs.DefaultKeyHeader: {DataType: aws.String("String"), StringValue: aws.String(o.OrderID)}}}
		if err := send(in); err != nil {
			return err
		}
		if len(later) > 0 && rng.IntN(2) == 0 {
			if err := send(later[0]); err != nil {
				return err
			}
			later = later[1:]
		}
		if rng.Float64() < r.dupRate {
			later = append(later, in)
		}
	}
	for _, in := range later {
		if err := send(in); err != nil {
			return err
		}
	}
	return nil
}

// sqsCharger is the payment service's handler in replica r: it charges
// the order, or refuses a malformed event for good. Every fifth charge
// takes 3s, longer than the queue's visibility timeout.
func sqsCharger(rep *queueReport, out io.Writer, r int) idemsqs.Handler {
	return func(ctx context.Context, m types.Message) error {
		var o queueOrder
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &o); err != nil {
			return idem.Permanent(fmt.Errorf("not an OrderCreated event: %w", err))
		}
		d := 20 * time.Millisecond // the payment provider's round trip
		if n, _ := strconv.Atoi(strings.TrimPrefix(o.OrderID, "order-")); n%5 == 0 {
			d = 3 * time.Second
		}
		time.Sleep(d)
		n := rep.charge(o.OrderID)
		fmt.Fprintf(out, "  replica %d: charged %s %d.%02d EUR to %s in %v (charge #%d of this order)\n",
			r, o.OrderID, o.AmountCents/100, o.AmountCents%100, o.Customer, d, n)
		return nil
	}
}
