package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/memstore"
)

// natsPayment is the body of a PaymentRequested message.
type natsPayment struct {
	ID          string `json:"id"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
}

// natsReport is what a run of the NATS example did.
type natsReport struct {
	published   int // payment requests the producer meant to send
	droppedDups int // resends the stream dropped within its duplicate window
	storedDups  int // resends the stream stored, past the window
	consumed    atomic.Int64
	replayed    atomic.Int64
	deadLetters atomic.Int64

	mu      sync.Mutex
	charges map[string]int // by tenant/payment ID
}

func (r *natsReport) charge(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.charges[id]++
	return r.charges[id]
}

// runNATS runs the payments example against the NATS server at url (with
// JetStream): a producer publishes payment requests of two tenants to a
// stream of the run's own, resends some of them within the stream's
// duplicate window and past it, and two consumer replicas charge them
// through idemnats. Each payment is charged once; a malformed one is
// dead-lettered. It writes what happens to out and deletes its streams at
// the end. args are its flags (-payments, -resend).
func runNATS(ctx context.Context, url string, out io.Writer, args []string) error {
	r := &natsRun{url: url, rep: &natsReport{charges: map[string]int{}}}
	if err := r.parseFlags(out, args); err != nil {
		return err
	}
	r.out = &natsLockedWriter{w: out} // the replicas write at once

	nc, err := nats.Connect(url, nats.Name("idem payments example"))
	if err != nil {
		return fmt.Errorf("payments: connecting to NATS at %s: %w", url, err)
	}
	defer nc.Close()
	if r.js, err = jetstream.New(nc); err != nil {
		return err
	}
	cons, deleteStreams, err := r.createStreams(ctx)
	if err != nil {
		return err
	}
	defer deleteStreams()
	fmt.Fprintf(r.out, "NATS %s (server %s): stream %s, duplicate window %v, dead letters to %s\n",
		url, nc.ConnectedServerVersion(), r.name, natsWindow, r.dlqSubject)

	if err := r.publishAndResend(ctx); err != nil {
		return err
	}
	start := func(store *memstore.Store, n int) (func(context.Context) error, func(), error) {
		c, closeGuard, err := r.replica(store, cons, n)
		if err != nil {
			return nil, nil, err
		}
		return c.Run, closeGuard, nil
	}
	// Every message published, the resends past the window included.
	done := func() bool { return r.rep.consumed.Load() >= int64(r.rep.published+r.rep.storedDups) }
	if err := runReplicas(ctx, start, r.resendPastWindow, done); err != nil {
		return err
	}
	return r.verdict(ctx)
}

// natsWindow is the stream's duplicate window: short, so that the example
// gets past it quickly.
const natsWindow = time.Second

// natsTenants are the tenants whose payments the producer publishes.
var natsTenants = []string{"acme", "globex"}

// natsRun is one run of the NATS example.
type natsRun struct {
	url              string
	out              io.Writer
	payments, resend int // the flags
	js               jetstream.JetStream
	name             string // the stream's
	dlq              jetstream.Stream
	dlqSubject       string
	rep              *natsReport
}

func (r *natsRun) parseFlags(out io.Writer, args []string) error {
	fs := flag.NewFlagSet("payments (NATS)", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&r.payments, "payments", 10, "payment requests to publish per tenant")
	fs.IntVar(&r.resend, "resend", 3, "payments per tenant the producer resends, within and past the duplicate window")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if r.payments < 3 || r.resend < 0 || r.resend > r.payments {
		return fmt.Errorf("payments: -payments %d and -resend %d: want 3 <= payments and 0 <= resend <= payments", r.payments, r.resend)
	}
	return nil
}

// createStreams creates the streams of this run's own, so that runs never
// see each other's messages, and the consumer of the payments' stream. It
// returns the consumer and the function that deletes the streams.
func (r *natsRun) createStreams(ctx context.Context) (jetstream.Consumer, func(), error) {
	r.name = "PAYMENTS_" + strings.ToUpper(rand.Text()[:8])
	stream, err := r.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       r.name,
		Subjects:   []string{strings.ToLower(r.name) + ".>"},
		Duplicates: natsWindow,
		Storage:    jetstream.MemoryStorage,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("payments: creating stream %s (is JetStream enabled? nats-server -js): %w", r.name, err)
	}
	deleted := []string{r.name}
	deleteStreams := func() {
		for _, name := range deleted {
			r.js.DeleteStream(context.WithoutCancel(ctx), name)
		}
	}
	r.dlqSubject = strings.ToLower(r.name) + "-dlq"
	r.dlq, err = r.js.CreateStream(ctx, jetstream.StreamConfig{Name: r.name + "_DLQ", Subjects: []string{r.dlqSubject}, Storage: jetstream.MemoryStorage})
	if err != nil {
		deleteStreams()
		return nil, nil, err
	}
	deleted = append(deleted, r.name+"_DLQ")
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:   "charger",
		AckPolicy: jetstream.AckExplicitPolicy,
		AckWait:   5 * time.Second,
	})
	if err != nil {
		deleteStreams()
		return nil, nil, err
	}
	return cons, deleteStreams, nil
}

// publish publishes payment i of tenant.
func (r *natsRun) publish(ctx context.Context, tenant string, i int) (*jetstream.PubAck, error) {
	p := natsPayment{ID: fmt.Sprintf("pay-%03d", i), Customer: fmt.Sprintf("cus-%s-%d", tenant, i%4), AmountCents: 500 + 250*i}
	if tenant == "globex" && i == 2 {
		p.AmountCents = -100 // a malformed request: poison
	}
	body, _ := json.Marshal(p)
	// payments.<tenant>.requested; the payment ID is the Nats-Msg-Id,
	// so that the stream drops a resend within its window.
	subj := strings.ToLower(r.name) + "." + tenant + ".requested"
	return r.js.Publish(ctx, subj, body, jetstream.WithMsgID(tenant+"/"+p.ID))
}

// publishAndResend publishes every payment, then resends the last ones at
// once, as a producer that crashed before it saw its acks does: the
// stream's window drops them.
func (r *natsRun) publishAndResend(ctx context.Context) error {
	for _, t := range natsTenants {
		for i := range r.payments {
			if _, err := r.publish(ctx, t, i); err != nil {
				return err
			}
			r.rep.published++
		}
	}
	for _, t := range natsTenants {
		for i := r.payments - r.resend; i < r.payments; i++ {
			ack, err := r.publish(ctx, t, i)
			if err != nil {
				return err
			}
			if ack.Duplicate {
				r.rep.droppedDups++
			}
		}
	}
	fmt.Fprintf(r.out, "published %d payment requests; %d resent at once, dropped by the stream's duplicate window\n",
		r.rep.published, r.rep.droppedDups)
	return nil
}

// replica returns the consumer of replica n of the payment service, over
// store, and the function that closes its Guard.
func (r *natsRun) replica(store *memstore.Store, cons jetstream.Consumer, n int) (*idemnats.Consumer, func(), error) {
	g, err := idem.New(store, idem.Config{Namespace: "payments"})
	if err != nil {
		return nil, nil, err
	}
	c, err := idemnats.New(g, cons, natsCharger(r.rep, r.out, n),
		// Keys are per tenant: globex can never make acme's payment
		// look like a duplicate of its own.
		idemnats.WithScope(func(msg jetstream.Msg) string { return strings.Split(msg.Subject(), ".")[1] }),
		idemnats.WithDeadLetter(r.js, r.dlqSubject),
		idemnats.WithBatchSize(4),
		idemnats.WithObserver(r.observe(n)))
	if err != nil {
		g.Close()
		return nil, nil, err
	}
	return c, func() { g.Close() }, nil
}

// observe counts and tells what replica n's consumer did with a message.
func (r *natsRun) observe(n int) func(context.Context, idemnats.Event) {
	rep, out := r.rep, r.out
	return func(_ context.Context, e idemnats.Event) {
		switch e.Kind {
		case idemnats.EventAcked:
			rep.consumed.Add(1)
			if e.Replayed {
				rep.replayed.Add(1)
				fmt.Fprintf(out, "  replica %d: %s is a duplicate: acked, not charged again\n", n, e.Key)
			}
		case idemnats.EventDeadLettered:
			rep.consumed.Add(1)
			rep.deadLetters.Add(1)
			fmt.Fprintf(out, "  replica %d: %s dead-lettered (%s): %v\n", n, e.Key, e.Reason, e.Err)
		case idemnats.EventDiscarded:
			// The stream refused its dead letter WithMaxAttempts
			// times: terminated, and logged at error level.
			rep.consumed.Add(1)
			fmt.Fprintf(out, "  replica %d: %s is poison (%s), its dead letter refused: %v\n", n, e.Key, e.Reason, e.BrokerErr)
		}
	}
}

// resendPastWindow resends the last payments once the window has passed,
// as a producer restarted from an old checkpoint does: the stream stores
// them, and idem catches them.
func (r *natsRun) resendPastWindow(ctx context.Context) error {
	time.Sleep(natsWindow)
	fmt.Fprintf(r.out, "past the window, the producer resends %d payments per tenant: the stream stores them again\n", r.resend)
	for _, t := range natsTenants {
		for i := r.payments - r.resend; i < r.payments; i++ {
			// The server forgets ids a little after the window ends.
			for try := 0; ; try++ {
				ack, err := r.publish(ctx, t, i)
				if err != nil {
					return err
				}
				if !ack.Duplicate {
					break
				}
				if try == 100 {
					return fmt.Errorf("payments: the stream still drops %s/pay-%03d as a duplicate, long past its window", t, i)
				}
				time.Sleep(20 * time.Millisecond)
			}
			r.rep.storedDups++
		}
	}
	return nil
}

// verdict writes what the run charged and fails if a payment was charged
// twice or not at all.
func (r *natsRun) verdict(ctx context.Context) error {
	rep := r.rep
	charges, twice := 0, 0
	for _, n := range rep.charges {
		charges += n
		twice += max(n-1, 0)
	}
	info, err := r.dlq.Info(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "\n%d messages consumed for %d payments: %d charged, %d charged twice, %d duplicates acked without a charge, %d dead-lettered (%d in %s)\n",
		rep.consumed.Load(), rep.published, charges, twice, rep.replayed.Load(), rep.deadLetters.Load(), info.State.Msgs, r.dlq.CachedInfo().Config.Name)
	if twice > 0 || charges != rep.published-1 {
		return fmt.Errorf("payments: %d charges for %d payments (one poison), %d twice", charges, rep.published, twice)
	}
	fmt.Fprintln(r.out, "OK: every payment charged once")
	return nil
}

// natsLockedWriter serialises the writes of the replicas.
type natsLockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *natsLockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// natsCharger is the payment service's handler in replica r: it charges
// the payment, or refuses a malformed one for good.
func natsCharger(rep *natsReport, out io.Writer, r int) idemnats.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		var p natsPayment
		if err := json.Unmarshal(msg.Data(), &p); err != nil {
			return idem.Permanent(fmt.Errorf("undecodable payment: %w", err))
		}
		if p.AmountCents <= 0 {
			return idem.Permanent(fmt.Errorf("amount %d cents: must be positive", p.AmountCents))
		}
		tenant := strings.Split(msg.Subject(), ".")[1]
		n := rep.charge(tenant + "/" + p.ID)
		fmt.Fprintf(out, "  replica %d: charged %s/%s %d.%02d EUR to %s (charge #%d of this payment)\n",
			r, tenant, p.ID, p.AmountCents/100, p.AmountCents%100, p.Customer, n)
		return nil
	}
}
