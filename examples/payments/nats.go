package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
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
	fs := flag.NewFlagSet("payments (NATS)", flag.ContinueOnError)
	fs.SetOutput(out)
	payments := fs.Int("payments", 10, "payment requests to publish per tenant")
	resend := fs.Int("resend", 3, "payments per tenant the producer resends, within and past the duplicate window")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *payments < 3 || *resend < 0 || *resend > *payments {
		return fmt.Errorf("payments: -payments %d and -resend %d: want 3 <= payments and 0 <= resend <= payments", *payments, *resend)
	}
	out = &natsLockedWriter{w: out} // the replicas write at once

	nc, err := nats.Connect(url, nats.Name("idem payments example"))
	if err != nil {
		return fmt.Errorf("payments: connecting to NATS at %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// Streams of this run's own, so that runs never see each other's
	// messages; deleted at the end.
	name := "PAYMENTS_" + strings.ToUpper(rand.Text()[:8])
	const window = time.Second
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       name,
		Subjects:   []string{strings.ToLower(name) + ".>"},
		Duplicates: window, // short, so that the example gets past it quickly
		Storage:    jetstream.MemoryStorage,
	})
	if err != nil {
		return fmt.Errorf("payments: creating stream %s (is JetStream enabled? nats-server -js): %w", name, err)
	}
	defer js.DeleteStream(context.WithoutCancel(ctx), name)
	dlqSubject := strings.ToLower(name) + "-dlq"
	dlq, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name + "_DLQ", Subjects: []string{dlqSubject}, Storage: jetstream.MemoryStorage})
	if err != nil {
		return err
	}
	defer js.DeleteStream(context.WithoutCancel(ctx), name+"_DLQ")
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:   "charger",
		AckPolicy: jetstream.AckExplicitPolicy,
		AckWait:   5 * time.Second,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "NATS %s (server %s): stream %s, duplicate window %v, dead letters to %s\n",
		url, nc.ConnectedServerVersion(), name, window, dlqSubject)

	rep := &natsReport{charges: map[string]int{}}
	tenants := []string{"acme", "globex"}
	publish := func(tenant string, i int) (*jetstream.PubAck, error) {
		p := natsPayment{ID: fmt.Sprintf("pay-%03d", i), Customer: fmt.Sprintf("cus-%s-%d", tenant, i%4), AmountCents: 500 + 250*i}
		if tenant == "globex" && i == 2 {
			p.AmountCents = -100 // a malformed request: poison
		}
		body, _ := json.Marshal(p)
		// payments.<tenant>.requested; the payment ID is the Nats-Msg-Id,
		// so that the stream drops a resend within its window.
		subj := strings.ToLower(name) + "." + tenant + ".requested"
		return js.Publish(ctx, subj, body, jetstream.WithMsgID(tenant+"/"+p.ID))
	}
	for _, t := range tenants {
		for i := range *payments {
			if _, err := publish(t, i); err != nil {
				return err
			}
			rep.published++
		}
	}
	// The producer crashed before it saw its acks, and resends its last
	// payments at once: the stream's window drops them.
	for _, t := range tenants {
		for i := *payments - *resend; i < *payments; i++ {
			ack, err := publish(t, i)
			if err != nil {
				return err
			}
			if ack.Duplicate {
				rep.droppedDups++
			}
		}
	}
	fmt.Fprintf(out, "published %d payment requests; %d resent at once, dropped by the stream's duplicate window\n",
		rep.published, rep.droppedDups)

	// Two replicas of the payment service, sharing one store.
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
		g, err := idem.New(store, idem.Config{Namespace: "payments"})
		if err != nil {
			return err
		}
		defer g.Close()
		c, err := idemnats.New(g, cons, natsCharger(rep, out, r+1),
			// Keys are per tenant: globex can never make acme's payment
			// look like a duplicate of its own.
			idemnats.WithScope(func(msg jetstream.Msg) string { return strings.Split(msg.Subject(), ".")[1] }),
			idemnats.WithDeadLetter(js, dlqSubject),
			idemnats.WithBatchSize(4),
			idemnats.WithObserver(func(_ context.Context, e idemnats.Event) {
				switch e.Kind {
				case idemnats.EventAcked:
					rep.consumed.Add(1)
					if e.Replayed {
						rep.replayed.Add(1)
						fmt.Fprintf(out, "  replica %d: %s is a duplicate: acked, not charged again\n", r+1, e.Key)
					}
				case idemnats.EventDeadLettered:
					rep.consumed.Add(1)
					rep.deadLetters.Add(1)
					fmt.Fprintf(out, "  replica %d: %s dead-lettered (%s): %v\n", r+1, e.Key, e.Reason, e.Err)
				case idemnats.EventDiscarded:
					// The stream refused its dead letter WithMaxAttempts
					// times: terminated, and logged at error level.
					rep.consumed.Add(1)
					fmt.Fprintf(out, "  replica %d: %s is poison (%s), its dead letter refused: %v\n", r+1, e.Key, e.Reason, e.BrokerErr)
				}
			}))
		if err != nil {
			return err
		}
		wg.Go(func() { errs[r] = c.Run(runCtx) })
	}

	// Past the window, the producer resends the same payments again, say
	// after a restart from an old checkpoint: the stream stores them, and
	// idem catches them.
	time.Sleep(window)
	fmt.Fprintf(out, "past the window, the producer resends %d payments per tenant: the stream stores them again\n", *resend)
	for _, t := range tenants {
		for i := *payments - *resend; i < *payments; i++ {
			// The server forgets ids a little after the window ends.
			for try := 0; ; try++ {
				ack, err := publish(t, i)
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
			rep.storedDups++
		}
	}

	want := int64(rep.published + rep.storedDups)
	for rep.consumed.Load() < want && ctx.Err() == nil {
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
	info, err := dlq.Info(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d messages consumed for %d payments: %d charged, %d charged twice, %d duplicates acked without a charge, %d dead-lettered (%d in %s)\n",
		rep.consumed.Load(), rep.published, charges, twice, rep.replayed.Load(), rep.deadLetters.Load(), info.State.Msgs, dlq.CachedInfo().Config.Name)
	if twice > 0 || charges != rep.published-1 {
		return fmt.Errorf("payments: %d charges for %d payments (one poison), %d twice", charges, rep.published, twice)
	}
	fmt.Fprintln(out, "OK: every payment charged once")
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
