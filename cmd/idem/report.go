package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// runReport is one row of the demo's table: what one consumer did with the
// stream.
type runReport struct {
	name          string
	messages      int // orders published, one message each (duplicates not counted)
	deliveries    int // every delivery, redeliveries included
	duplicates    int // duplicate copies delivered
	crashes       [3]int64
	charges       int
	doubleCharges int // charges beyond the first of an order
	lost          int // orders not charged, or with a message not acked, when the run ended
	elapsed       time.Duration
	timedOut      bool

	takeovers int64 // claims that took over a key after its holder crashed (idem only)
	busy      int64 // claims that found the key held by a live lease (idem only)
}

// crashCount returns the crashes at both points.
func (r runReport) crashCount() int64 {
	return r.crashes[crashBeforeCharge] + r.crashes[crashAfterCharge]
}

// tally builds the row of a finished run from the ledger's charges and the
// broker's counts.
func tally(name string, l *ledger, bs brokerStats, rs *runStats, elapsed time.Duration, timedOut bool) runReport {
	r := runReport{
		name:       name,
		messages:   len(l.charges),
		deliveries: bs.deliveries,
		duplicates: bs.duplicates,
		elapsed:    elapsed,
		timedOut:   timedOut,
		takeovers:  rs.takeovers.Load(),
		busy:       rs.busy.Load(),
	}
	for i := range rs.crashes {
		r.crashes[i] = rs.crashes[i].Load()
	}
	for order := range l.charges {
		n := int(l.charges[order].Load())
		r.charges += n
		r.doubleCharges += max(n-1, 0)
		if n == 0 || bs.unacked[order] {
			r.lost++
		}
	}
	return r
}

// writeTable writes the rows under a header that defines the columns.
func writeTable(w io.Writer, rows ...runReport) {
	fmt.Fprintln(w, "double charges: charges beyond the first of an order; lost: orders not charged, or not acked, at the end")
	fmt.Fprintln(w)
	// Right-aligned numbers; the names are padded so they read left-aligned.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "consumer\tmessages\tdeliveries\tduplicates\tcrashes\tcharges\tdouble charges\tlost\ttime\t")
	for _, r := range rows {
		elapsed := r.elapsed.Round(10 * time.Millisecond).String()
		if r.timedOut {
			elapsed += " (timed out)"
		}
		fmt.Fprintf(tw, "%-8s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.name, r.messages, r.deliveries, r.duplicates,
			r.crashCount(), r.charges, r.doubleCharges, r.lost, elapsed)
	}
	tw.Flush()
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// startProgress draws a progress bar of done() out of total on w until stop
// is called, which erases it. It draws nothing unless w is a terminal.
func startProgress(w io.Writer, label string, total int, done func() int64) (stop func()) {
	if !isTerminal(w) {
		return func() {}
	}
	const width = 40
	quit, finished := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			n := int(done())
			fill := width * n / max(total, 1)
			fmt.Fprintf(w, "\r%-6s [%s%s] %d/%d acked  %.1fs", label,
				strings.Repeat("=", fill), strings.Repeat(" ", width-fill), n, total, time.Since(start).Seconds())
			select {
			case <-tick.C:
			case <-quit:
				fmt.Fprint(w, "\r\033[K")
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-finished
	}
}
