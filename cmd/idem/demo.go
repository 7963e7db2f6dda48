package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
)

func init() {
	register(command{
		name:    "demo",
		summary: "a payment stream with duplicates and crashes: a naive consumer against an idem-guarded one",
		run:     runDemo,
	})
}

// The demo's timings, short so that takeovers after crashes happen within
// the run. A crashed consumer's message comes back after the visibility
// timeout, by when the lease it left behind has mostly ended.
const (
	demoLease      = 200 * time.Millisecond
	demoVisibility = 250 * time.Millisecond
)

// demoOptions are the flags of idem demo.
type demoOptions struct {
	messages  int
	consumers int
	dupRate   float64
	crashRate float64
	seed      uint64
	store     string
	keep      bool          // keep the records in the store after the run
	broker    string        // "": the in-process queue; kafka: Kafka; nats://…: NATS JetStream; amqp://…: RabbitMQ
	brokers   string        // kafka: seed brokers, host:port,…
	timeout   time.Duration // per run
}

func parseDemoFlags(args []string, stderr io.Writer) (demoOptions, error) {
	var o demoOptions
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.messages, "messages", 1000, "orders to publish, one OrderCreated message each")
	fs.IntVar(&o.consumers, "consumers", 8, "concurrent consumers")
	fs.Float64Var(&o.dupRate, "dup-rate", 0.2, "chance that a message is delivered an extra time, in [0, 1)")
	fs.Float64Var(&o.crashRate, "crash-rate", 0.02, "chance that a consumer crashes while handling a delivery, in [0, 1)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the messages, duplicates and crash points (default: from the clock, printed)")
	fs.StringVar(&o.store, "store", "mem://", storeUsage)
	fs.StringVar(&o.broker, "broker", "", "the broker the stream goes through: kafka for Kafka consumer groups (with --brokers), nats://host:port for NATS JetStream, amqp://user:password@host:port/vhost for RabbitMQ (default: an in-process queue)")
	fs.StringVar(&o.brokers, "brokers", "", "with --broker kafka, required: the seed brokers host:port,... of a Kafka cluster to run on; the demo creates topics and consumer groups of its own there (unique names) and deletes the topics at the end")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "how long each run may take; orders not acked by then count as lost")
	fs.BoolVar(&o.keep, "keep", false, "keep the run's records in the store (they expire after an hour) instead of deleting them at the end")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: idem demo [flags]

Sends one stream of OrderCreated events, with duplicate deliveries and
consumer crashes, through a naive consumer that charges for every delivery
and through one that charges inside idem's Guard.Do, and shows what each
charged. Fails (status 1) if the idem consumer charges an order twice or
leaves one uncharged. Consumers crash before a charge or after its outcome
is stored, never in between: the demo does not show the window a crash
between the two leaves (see FAULTS.md in idem's repository).

Flags:
`)
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	seeded := false
	fs.Visit(func(f *flag.Flag) { seeded = seeded || f.Name == "seed" })
	if !seeded {
		o.seed = uint64(time.Now().UnixNano())
	}
	switch {
	case o.messages < 1:
		return o, usageErrorf("idem: --messages %d: must be at least 1", o.messages)
	case o.consumers < 1:
		return o, usageErrorf("idem: --consumers %d: must be at least 1", o.consumers)
	case !(o.dupRate >= 0 && o.dupRate < 1):
		return o, usageErrorf("idem: --dup-rate %v: must be at least 0 and below 1", o.dupRate)
	case !(o.crashRate >= 0 && o.crashRate < 1):
		return o, usageErrorf("idem: --crash-rate %v: must be at least 0 and below 1", o.crashRate)
	case o.timeout <= 0:
		return o, usageErrorf("idem: --timeout %v: must be positive", o.timeout)
	case o.broker != "" && o.broker != "kafka" && !strings.HasPrefix(o.broker, "nats://") && !strings.HasPrefix(o.broker, "amqp://") && !strings.HasPrefix(o.broker, "amqps://"):
		return o, usageErrorf("idem: --broker %q: kafka, or a nats:// or amqp:// URL", o.broker)
	case o.brokers != "" && o.broker != "kafka":
		return o, usageErrorf("idem: --brokers %q: only with --broker kafka", o.brokers)
	}
	return o, nil
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseDemoFlags(args, stderr)
	if err != nil {
		return err
	}
	_, _, err = demo(ctx, o, stdout, stderr)
	return err
}

// demo runs the stream of o through the naive consumer, then through the
// guarded one, and writes the table to stdout and a progress bar to stderr
// (if a terminal). It returns the two rows, and an error when the store
// cannot be opened, ctx ends, or the guarded consumer charged an order
// twice or lost one.
func demo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) (naive, guarded runReport, err error) {
	if o.broker == "kafka" {
		return demoKafka(ctx, o, stdout, stderr)
	}
	store, closeStore, err := openStore(ctx, o.store, true)
	if err != nil {
		return naive, guarded, err
	}
	defer func() { err = errors.Join(err, closeStore()) }()

	stream := newStream(o.seed, o.messages, o.dupRate)
	plan := crashPlan{seed: o.seed, rate: o.crashRate}
	runs, via := runStreamFunc(runStream), ""
	switch {
	case strings.HasPrefix(o.broker, "nats://"):
		runs, via = natsRunStream(o.broker), ", broker "+o.broker
	case o.broker != "":
		runs, via = amqpRunStream(o.broker), ", broker "+storeurl.Redact(o.broker)
	}
	fmt.Fprintf(stdout, "idem demo: %d orders, %d consumers, dup rate %v, crash rate %v, store %s%s\n",
		o.messages, o.consumers, o.dupRate, o.crashRate, storeurl.Redact(o.store), via)
	fmt.Fprintf(stdout, "seed %d (repeat this run with --seed %d)\n", o.seed, o.seed)

	naive, err = runs(ctx, o, "naive", stream, plan, stderr, func(_ *process, l *ledger) (handler, func(), error) {
		return naiveHandler{ledger: l}, func() {}, nil
	})
	if err != nil {
		return naive, guarded, err
	}

	// Each consumer process has a Guard of its own, as separate processes
	// would, over its own connection to the shared store; a fresh namespace
	// keeps the records of earlier runs in a shared store out of the way.
	cfg := idem.Config{
		Namespace: fmt.Sprintf("idem-demo/%d/%d", o.seed, time.Now().UnixNano()),
		Lease:     demoLease,
		Retention: time.Hour,
	}
	guarded, err = runs(ctx, o, "idem", stream, plan, stderr, func(p *process, l *ledger) (handler, func(), error) {
		g, err := idem.New(processStore{store: store, p: p}, cfg)
		if err != nil {
			return nil, nil, err
		}
		return guardedHandler{guard: g, ledger: l}, func() { g.Close() }, nil
	})
	defer func() { err = errors.Join(err, cleanUpDemo(ctx, o, store, cfg, stream, stdout)) }()
	if err != nil {
		return naive, guarded, err
	}

	fmt.Fprintln(stdout)
	writeTable(stdout, naive, guarded)
	back := fmt.Sprintf("after the %v visibility timeout", demoVisibility)
	if strings.HasPrefix(o.broker, "amqp") {
		back = "as soon as its connection closes" // RabbitMQ requeues at once
	}
	fmt.Fprintf(stdout, "\ncrashes before the charge / after it: naive %d / %d, idem %d / %d. A crashed consumer acks nothing:\n"+
		"its message comes back %s. idem's consumer crashes before the charge\n"+
		"inside Do, holding the order: %d orders were taken over once the %v lease ended, and %d deliveries\n"+
		"found their order in progress and were nacked for later.\n",
		naive.crashes[crashBeforeCharge], naive.crashes[crashAfterCharge],
		guarded.crashes[crashBeforeCharge], guarded.crashes[crashAfterCharge],
		back, guarded.takeovers, demoLease, guarded.busy)

	if guarded.doubleCharges > 0 || guarded.lost > 0 {
		why := ""
		if guarded.timedOut {
			why = fmt.Sprintf("; its run timed out after %v (--timeout)", o.timeout)
		}
		return naive, guarded, fmt.Errorf("idem: demo failed: the idem consumer made %d double charges and lost %d orders%s (seed %d)",
			guarded.doubleCharges, guarded.lost, why, o.seed)
	}
	fmt.Fprintf(stdout, "\nOK: idem charged every order once in this run; the naive consumer made %d double charges.\n", naive.doubleCharges)
	fmt.Fprint(stdout, demoLimit)
	return naive, guarded, nil
}

// demoLimit is what the verdict does not show: the demo's crashes never
// fall between a charge and its stored outcome.
const demoLimit = `The crashes fall before a charge or after its outcome is stored, never between the two. A crash there,
in the window a lease-based store leaves, charges again once the lease ends, unless the charge is fenced
with the claim's token or written in the store's own transaction: FAULTS.md, in idem's repository,
counts what each store and mode let through when processes die there.
`

// runStream delivers stream to o.consumers consumer slots, each running one
// process after another (a crashed process is replaced), whose handlers
// newHandler makes, until every message is acked or o.timeout passes.
func runStream(ctx context.Context, o demoOptions, name string, stream []message, plan crashPlan, stderr io.Writer,
	newHandler func(p *process, l *ledger) (handler, func(), error)) (runReport, error) {
	b := newBroker(stream, demoVisibility)
	l := newLedger(o.messages)
	var stats runStats
	runCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	stopProgress := startProgress(stderr, name, len(stream), b.acked.Load)
	start := time.Now()
	errs := make([]error, o.consumers)
	var wg sync.WaitGroup
	for i := range o.consumers {
		wg.Go(func() {
			errs[i] = consume(runCtx, b, plan, &stats, func(p *process) (handler, func(), error) { return newHandler(p, l) })
			if errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()

	if err := errors.Join(errs...); err != nil {
		return runReport{}, err
	}
	if ctx.Err() != nil {
		return runReport{}, fmt.Errorf("idem: demo interrupted: %w", context.Cause(ctx))
	}
	timedOut := errors.Is(runCtx.Err(), context.DeadlineExceeded)
	return tally(name, l, b.stats(o.messages), &stats, elapsed, timedOut), nil
}

// cleanUpDemo deletes the records the guarded run wrote, unless o.keep; in
// a shared store it says where they are. An in-process store goes with the
// process.
func cleanUpDemo(ctx context.Context, o demoOptions, store storage.Store, cfg idem.Config, stream []message, stdout io.Writer) error {
	if strings.HasPrefix(o.store, "mem:") {
		return nil
	}
	if o.keep {
		fmt.Fprintf(stdout, "\nThe run's %d records stay in %s under namespace %q; they expire after %v.\n",
			o.messages, storeurl.Redact(o.store), cfg.Namespace, cfg.Retention)
		return nil
	}
	ctx = context.WithoutCancel(ctx) // an interrupted run still cleans up
	deleted := map[string]bool{}
	for _, m := range stream {
		if deleted[m.key] {
			continue
		}
		deleted[m.key] = true
		if err := store.Delete(ctx, storage.StoreKey(cfg.Namespace, m.key)); err != nil {
			return fmt.Errorf("idem: demo: deleting its records from %s: %w", storeurl.Redact(o.store), err)
		}
	}
	fmt.Fprintf(stdout, "\nDeleted the run's %d records from %s (namespace %q); --keep keeps them.\n",
		len(deleted), storeurl.Redact(o.store), cfg.Namespace)
	return nil
}
