package demo

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is one row of the demo's table: what one consumer did with the
// stream.
type Report struct {
	Name          string
	Messages      int // orders published, one message each (duplicates not counted)
	Deliveries    int // every delivery, redeliveries included
	Duplicates    int // duplicate copies delivered
	Crashes       [3]int64
	Charges       int
	DoubleCharges int // charges beyond the first of an order
	Lost          int // orders not charged, or with a message not acked, when the run ended
	Elapsed       time.Duration
	TimedOut      bool

	Takeovers int64 // claims that took over a key after its holder crashed (idem only)
	Busy      int64 // claims that found the key held by a live lease (idem only)
}

// crashCount returns the crashes at both points.
func (r Report) crashCount() int64 {
	return r.Crashes[CrashBeforeCharge] + r.Crashes[CrashAfterCharge]
}

// Tally builds the row of a finished run from the ledger's charges and the
// broker's counts.
func Tally(name string, l *Ledger, bs BrokerStats, rs *RunStats, elapsed time.Duration, timedOut bool) Report {
	r := Report{
		Name:       name,
		Messages:   len(l.charges),
		Deliveries: bs.Deliveries,
		Duplicates: bs.Duplicates,
		Elapsed:    elapsed,
		TimedOut:   timedOut,
		Takeovers:  rs.Takeovers.Load(),
		Busy:       rs.Busy.Load(),
	}
	for i := range rs.Crashes {
		r.Crashes[i] = rs.Crashes[i].Load()
	}
	for order := range l.charges {
		n := int(l.charges[order].Load())
		r.Charges += n
		r.DoubleCharges += max(n-1, 0)
		if n == 0 || bs.Unacked[order] {
			r.Lost++
		}
	}
	return r
}

// WriteTable writes the rows under a header that defines the columns.
func WriteTable(w io.Writer, rows ...Report) {
	fmt.Fprintln(w, "double charges: charges beyond the first of an order; lost: orders not charged, or not acked, at the end")
	fmt.Fprintln(w)
	// Right-aligned numbers; the names are padded so they read left-aligned.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "consumer\tmessages\tdeliveries\tduplicates\tcrashes\tcharges\tdouble charges\tlost\ttime\t")
	for _, r := range rows {
		elapsed := r.Elapsed.Round(10 * time.Millisecond).String()
		if r.TimedOut {
			elapsed += " (timed out)"
		}
		fmt.Fprintf(tw, "%-8s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.Name, r.Messages, r.Deliveries, r.Duplicates,
			r.crashCount(), r.Charges, r.DoubleCharges, r.Lost, elapsed)
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

// StartProgress draws a progress bar of done() out of total on w until stop
// is called, which erases it. It draws nothing unless w is a terminal.
func StartProgress(w io.Writer, label string, total int, done func() int64) (stop func()) {
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
