package demo

import (
	"cmp"
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
)

// The demo's timings, short so that takeovers after crashes happen within
// the run. A crashed consumer's message comes back after the visibility
// timeout, by when the lease it left behind has mostly ended.
const (
	Lease      = 200 * time.Millisecond
	Visibility = 250 * time.Millisecond
)

// Options are the flags every demo takes.
type Options struct {
	Messages  int
	Consumers int
	DupRate   float64
	CrashRate float64
	Seed      uint64
	Store     string        // the store's URL
	StoreName string        // Store as the demo prints it: without its password
	Keep      bool          // keep the records in the store after the run
	Timeout   time.Duration // per run
}

// Flags defines o's flags on fs; storeUsage is the help of --store.
func (o *Options) Flags(fs *flag.FlagSet, storeUsage string) {
	fs.IntVar(&o.Messages, "messages", 1000, "orders to publish, one OrderCreated message each")
	fs.IntVar(&o.Consumers, "consumers", 8, "concurrent consumers")
	fs.Float64Var(&o.DupRate, "dup-rate", 0.2, "chance that a message is delivered an extra time, in [0, 1)")
	fs.Float64Var(&o.CrashRate, "crash-rate", 0.02, "chance that a consumer crashes while handling a delivery, in [0, 1)")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the messages, duplicates and crash points (default: from the clock, printed)")
	fs.StringVar(&o.Store, "store", "mem://", storeUsage)
	fs.DurationVar(&o.Timeout, "timeout", time.Minute, "how long each run may take; orders not acked by then count as lost")
	fs.BoolVar(&o.Keep, "keep", false, "keep the run's records in the store (they expire after an hour) instead of deleting them at the end")
}

// Check takes the seed from the clock when fs, which parsed o's flags,
// had no --seed, and returns an error naming the first flag whose value
// is out of range.
func (o *Options) Check(fs *flag.FlagSet) error {
	seeded := false
	fs.Visit(func(f *flag.Flag) { seeded = seeded || f.Name == "seed" })
	if !seeded {
		o.Seed = uint64(time.Now().UnixNano())
	}
	switch {
	case o.Messages < 1:
		return fmt.Errorf("idem: --messages %d: must be at least 1", o.Messages)
	case o.Consumers < 1:
		return fmt.Errorf("idem: --consumers %d: must be at least 1", o.Consumers)
	case !(o.DupRate >= 0 && o.DupRate < 1):
		return fmt.Errorf("idem: --dup-rate %v: must be at least 0 and below 1", o.DupRate)
	case !(o.CrashRate >= 0 && o.CrashRate < 1):
		return fmt.Errorf("idem: --crash-rate %v: must be at least 0 and below 1", o.CrashRate)
	case o.Timeout <= 0:
		return fmt.Errorf("idem: --timeout %v: must be positive", o.Timeout)
	}
	return nil
}

// About says what the demo does, for the help of its commands.
const About = `Sends one stream of OrderCreated events, with duplicate deliveries and
consumer crashes, through a naive consumer that charges for every delivery
and through one that charges inside idem's Guard.Do, and shows what each
charged. Fails (status 1) if the idem consumer charges an order twice or
leaves one uncharged. Consumers crash before a charge or after its outcome
is stored, never in between: the demo does not show the window a crash
between the two leaves (see FAULTS.md in idem's repository).
`

// RunFunc runs stream through the consumers, o.Consumers slots of them
// each running one process after another (a crashed process is replaced),
// whose handlers newHandler makes, until every message is acked or
// o.Timeout passes, and returns the run's row of the table.
type RunFunc func(ctx context.Context, o Options, name string, stream []Message, plan CrashPlan, stderr io.Writer,
	newHandler func(p *Process, l *Ledger) (Handler, func(), error)) (Report, error)

// Transport is the way the stream travels from the producer to the
// consumers.
type Transport struct {
	Run  RunFunc // nil: an in-process queue
	Via  string  // what the first line adds after the store, such as ", broker nats://…"
	Back string  // when a crashed consumer's message comes back; "": after the visibility timeout
}

// Run runs the stream of o through the naive consumer, then through the
// guarded one, over store and by way of t, and writes the table to stdout
// and a progress bar to stderr (if a terminal). It returns the two rows,
// and an error when ctx ends, or the guarded consumer charged an order
// twice or lost one.
func Run(ctx context.Context, o Options, store storage.Store, t Transport, stdout, stderr io.Writer) (naive, guarded Report, err error) {
	stream := NewStream(o.Seed, o.Messages, o.DupRate)
	plan := CrashPlan{Seed: o.Seed, Rate: o.CrashRate}
	runs := t.Run
	if runs == nil {
		runs = runStream
	}
	fmt.Fprintf(stdout, "idem demo: %d orders, %d consumers, dup rate %v, crash rate %v, store %s%s\n",
		o.Messages, o.Consumers, o.DupRate, o.CrashRate, o.StoreName, t.Via)
	fmt.Fprintf(stdout, "seed %d (repeat this run with --seed %d)\n", o.Seed, o.Seed)

	naive, err = runs(ctx, o, "naive", stream, plan, stderr, func(_ *Process, l *Ledger) (Handler, func(), error) {
		return NaiveHandler{Ledger: l}, func() {}, nil
	})
	if err != nil {
		return naive, guarded, err
	}

	// Each consumer process has a Guard of its own, as separate processes
	// would, over its own connection to the shared store; a fresh namespace
	// keeps the records of earlier runs in a shared store out of the way.
	cfg := idem.Config{
		Namespace: fmt.Sprintf("idem-demo/%d/%d", o.Seed, time.Now().UnixNano()),
		Lease:     Lease,
		Retention: time.Hour,
	}
	guarded, err = runs(ctx, o, "idem", stream, plan, stderr, func(p *Process, l *Ledger) (Handler, func(), error) {
		g, err := idem.New(ProcessStore{Store: store, Process: p}, cfg)
		if err != nil {
			return nil, nil, err
		}
		return GuardedHandler{Guard: g, Ledger: l}, func() { g.Close() }, nil
	})
	defer func() { err = errors.Join(err, CleanUp(ctx, o, store, cfg, stream, stdout)) }()
	if err != nil {
		return naive, guarded, err
	}

	fmt.Fprintln(stdout)
	WriteTable(stdout, naive, guarded)
	back := cmp.Or(t.Back, fmt.Sprintf("after the %v visibility timeout", Visibility))
	fmt.Fprintf(stdout, "\ncrashes before the charge / after it: naive %d / %d, idem %d / %d. A crashed consumer acks nothing:\n"+
		"its message comes back %s. idem's consumer crashes before the charge\n"+
		"inside Do, holding the order: %d orders were taken over once the %v lease ended, and %d deliveries\n"+
		"found their order in progress and were nacked for later.\n",
		naive.Crashes[CrashBeforeCharge], naive.Crashes[CrashAfterCharge],
		guarded.Crashes[CrashBeforeCharge], guarded.Crashes[CrashAfterCharge],
		back, guarded.Takeovers, Lease, guarded.Busy)

	if guarded.DoubleCharges > 0 || guarded.Lost > 0 {
		why := ""
		if guarded.TimedOut {
			why = fmt.Sprintf("; its run timed out after %v (--timeout)", o.Timeout)
		}
		return naive, guarded, fmt.Errorf("idem: demo failed: the idem consumer made %d double charges and lost %d orders%s (seed %d)",
			guarded.DoubleCharges, guarded.Lost, why, o.Seed)
	}
	fmt.Fprintf(stdout, "\nOK: idem charged every order once in this run; the naive consumer made %d double charges.\n", naive.DoubleCharges)
	fmt.Fprint(stdout, Limit)
	return naive, guarded, nil
}

// Limit is what the verdict does not show: the demo's crashes never
// fall between a charge and its stored outcome.
const Limit = `The crashes fall before a charge or after its outcome is stored, never between the two. A crash there,
in the window a lease-based store leaves, charges again once the lease ends, unless the charge is fenced
with the claim's token or written in the store's own transaction: FAULTS.md, in idem's repository,
counts what each store and mode let through when processes die there.
`

// runStream is the RunFunc of the in-process queue.
func runStream(ctx context.Context, o Options, name string, stream []Message, plan CrashPlan, stderr io.Writer,
	newHandler func(p *Process, l *Ledger) (Handler, func(), error)) (Report, error) {
	b := newBroker(stream, Visibility)
	return RunConsumers(ctx, o, name, len(stream), b.acked.Load, nil, stderr,
		func(ctx context.Context, l *Ledger, stats *RunStats) error {
			return consume(ctx, b, plan, stats, func(p *Process) (Handler, func(), error) { return newHandler(p, l) })
		},
		func() BrokerStats { return b.stats(o.Messages) })
}

// RunConsumers runs the consumers of one run of a RunFunc: o.Consumers
// slots at once, each calling slot with the run's ledger and counts until
// it returns, and a progress bar of acked() out of total on stderr. The
// slots' context ends after o.Timeout, at the first slot's error, or once
// done is closed (nil: never). It returns the run's row of the table, with
// what brokerStats counted once the slots returned; or the slots' errors,
// or an error when ctx ended first.
func RunConsumers(ctx context.Context, o Options, name string, total int, acked func() int64, done <-chan struct{}, stderr io.Writer,
	slot func(ctx context.Context, l *Ledger, stats *RunStats) error, brokerStats func() BrokerStats) (Report, error) {
	l := NewLedger(o.Messages)
	var stats RunStats
	runCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if done != nil {
		go func() {
			select {
			case <-done:
				cancel()
			case <-runCtx.Done():
			}
		}()
	}

	stopProgress := StartProgress(stderr, name, total, acked)
	start := time.Now()
	errs := make([]error, o.Consumers)
	var wg sync.WaitGroup
	for i := range o.Consumers {
		wg.Go(func() {
			errs[i] = slot(runCtx, l, &stats)
			if errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()

	if err := errors.Join(errs...); err != nil {
		return Report{}, err
	}
	if ctx.Err() != nil {
		return Report{}, fmt.Errorf("idem: demo interrupted: %w", context.Cause(ctx))
	}
	timedOut := acked() < int64(total)
	return Tally(name, l, brokerStats(), &stats, elapsed, timedOut), nil
}

// CleanUp deletes the records the guarded run wrote, unless o.Keep; in
// a shared store it says where they are. An in-process store goes with the
// process.
func CleanUp(ctx context.Context, o Options, store storage.Store, cfg idem.Config, stream []Message, stdout io.Writer) error {
	if strings.HasPrefix(o.Store, "mem:") {
		return nil
	}
	if o.Keep {
		fmt.Fprintf(stdout, "\nThe run's %d records stay in %s under namespace %q; they expire after %v.\n",
			o.Messages, o.StoreName, cfg.Namespace, cfg.Retention)
		return nil
	}
	ctx = context.WithoutCancel(ctx) // an interrupted run still cleans up
	deleted := map[string]bool{}
	for _, m := range stream {
		if deleted[m.Key] {
			continue
		}
		deleted[m.Key] = true
		if err := store.Delete(ctx, storage.StoreKey(cfg.Namespace, m.Key)); err != nil {
			return fmt.Errorf("idem: demo: deleting its records from %s: %w", o.StoreName, err)
		}
	}
	fmt.Fprintf(stdout, "\nDeleted the run's %d records from %s (namespace %q); --keep keeps them.\n",
		len(deleted), o.StoreName, cfg.Namespace)
	return nil
}
