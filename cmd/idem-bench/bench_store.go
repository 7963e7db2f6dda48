package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/idemgo/idem/storeurl"
)

// idem-bench store measures a store beside the least a client of the same
// server must do for the same work (its "bare" side), in interleaved
// rounds: every round runs each case's store side and bare side once, one
// right after the other, so that a machine whose speed drifts weighs on
// both sides of each round's ratio alike. The table shows the medians of
// the rounds and the median of each round's own store ÷ bare ratio.

// benchStoreOptions are the flags of idem-bench store.
type benchStoreOptions struct {
	store      string
	rounds     int
	duration   time.Duration // of each side of each case, in each round
	ops        int           // instead of duration: operations per side
	goroutines []int
	cases      []string // nil for every case the store has
	sides      []string // "store", "bare" or both, in the order of the first round
	json       bool
	report     string // a directory for the run's JSON and chart
}

func parseBenchStoreFlags(args []string, stderr io.Writer) (benchStoreOptions, error) {
	var (
		o                        benchStoreOptions
		goroutines, cases, sides string
	)
	fs := flag.NewFlagSet("store", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.store, "store", "", "the store to measure (required): mem://, redis://host:port[/db] (rediss:// for TLS) or postgres://user@host:port/db")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds; each runs every case's store side and bare side once, in turn")
	fs.DurationVar(&o.duration, "duration", time.Second, "how long each side of a case runs in each round")
	fs.IntVar(&o.ops, "ops", 0, "if set, each side of a case runs exactly this many operations per round instead of --duration")
	fs.StringVar(&goroutines, "goroutines", "1,16,64", "comma-separated numbers of goroutines each case runs with")
	fs.StringVar(&cases, "cases", "", "comma-separated cases to run (default: every case the store has): "+strings.Join(storeBenchCases, ", "))
	fs.StringVar(&sides, "sides", "store,bare", "the sides to run: store, bare or both")
	fs.BoolVar(&o.json, "json", false, "also print the results as JSON, after the table")
	fs.StringVar(&o.report, "report", "", reportUsage)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchStoreUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	switch {
	case o.store == "":
		return o, usageErrorf("idem-bench: store: --store is required")
	case o.rounds < 1:
		return o, usageErrorf("idem-bench: --rounds %d: must be at least 1", o.rounds)
	case o.duration <= 0:
		return o, usageErrorf("idem-bench: --duration %v: must be positive", o.duration)
	case o.ops < 0:
		return o, usageErrorf("idem-bench: --ops %d: must not be negative", o.ops)
	}
	if err := o.parseLists(goroutines, cases, sides); err != nil {
		return o, err
	}
	return o, nil
}

// benchStoreUsage is the help of idem-bench store, before its flags.
const benchStoreUsage = `Usage: idem-bench store --store URL [flags]

Measures the store at --store beside its bare side: the least a client of
the same server does for the same work, with the same client library,
connections and goroutines, and nothing of idem:

  claim-complete  Claim then Complete a new key. Bare: memory, sync.Map
                  LoadOrStore then Store; Redis, a SET NX PX script then a
                  compare-and-SET script (EVALSHA); PostgreSQL, INSERT … ON
                  CONFLICT DO NOTHING then the fenced UPDATE, on a table of
                  the records table's shape.
  claim-batch     ClaimBatch of 100 new keys. Bare: 100 LoadOrStore; a
                  100-deep pipeline of the claim script; one INSERT … SELECT
                  FROM unnest of the 100 rows.
  do              Guard.Do of a new key (fingerprint, claim, lease, run,
                  complete). Bare: as claim-complete.
  do-duplicate    Guard.Do of a completed key. Bare: one read of the stored
                  outcome (LoadOrStore of a present key; GET; SELECT).
  do-cached       memory only: Guard.Do of a completed key with the Guard's
                  local cache (Config.CacheSize) on. Bare: as do-duplicate.
  txguard-do      PostgreSQL only: TxGuard.Do of one ledger INSERT. Bare:
                  BEGIN, the same INSERT, COMMIT.

Each round runs every case with each --goroutines, its store side and its
bare side one right after the other (which goes first alternates from
round to round), for --duration each, so that drift in the machine's speed
weighs on both sides of a round alike. The table shows the medians of the
rounds' keys per second and allocations per operation (the client's, less
the keys' own strings), and the median of the rounds' own store ÷ bare
ratios, followed by every round's ratio.

Redis keys go under ?prefix= (default idem-bench:) and a run id, and
expire within a minute. PostgreSQL's tables go in a schema of their own,
idem_bench_<id>, dropped at the end. Each PostgreSQL side gets a pool of
one connection per goroutine; Redis a client whose pool has one per
goroutine of the largest count.

Flags:
`

// parseLists parses the flags that list goroutines, cases and sides.
func (o *benchStoreOptions) parseLists(goroutines, cases, sides string) error {
	for _, f := range commaList(goroutines) {
		g, err := strconv.Atoi(f)
		if err != nil || g < 1 || g > 1024 {
			return usageErrorf("idem-bench: --goroutines %q: want numbers from 1 to 1024, comma-separated", goroutines)
		}
		o.goroutines = append(o.goroutines, g)
	}
	if cases != "" {
		o.cases = commaList(cases)
		for _, c := range o.cases {
			if !slices.Contains(storeBenchCases, c) {
				return usageErrorf("idem-bench: --cases: unknown case %q (cases: %s)", c, strings.Join(storeBenchCases, ", "))
			}
		}
	}
	o.sides = commaList(sides)
	if slices.ContainsFunc(o.sides, func(s string) bool { return s != "store" && s != "bare" }) ||
		len(o.sides) > 2 || len(o.sides) == 2 && o.sides[0] == o.sides[1] {
		return usageErrorf("idem-bench: --sides %q: want store, bare or store,bare", sides)
	}
	return nil
}

// commaList returns the comma-separated items of s, trimmed.
func commaList(s string) []string {
	items := strings.Split(s, ",")
	for i, item := range items {
		items[i] = strings.TrimSpace(item)
	}
	return items
}

func runBenchStore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseBenchStoreFlags(args, stderr)
	if err == nil {
		_, err = benchStore(ctx, o, stdout, stderr)
	}
	return err
}

// storeBenchOp is one operation of a side: the i-th of the phase, whose
// keys w makes.
type storeBenchOp func(ctx context.Context, w *storeBenchWorker, i int) error

// storeBenchSide readies one side of a case for a phase on g goroutines:
// the operation to time, and what to release once the phase is over.
type storeBenchSide func(ctx context.Context, g int) (op storeBenchOp, release func(), err error)

// storeBenchCase is one row of the table per goroutine count.
type storeBenchCase struct {
	name  string // as --cases names it
	title string
	keys  int // keys per operation
	store storeBenchSide
	bare  storeBenchSide
}

// storeBenchCases are the cases in the order they run and print.
var storeBenchCases = []string{"claim-complete", "claim-batch", "do", "do-duplicate", "do-cached", "txguard-do"}

// storeBenchWorker is one goroutine of a phase. It makes the phase's keys,
// each with exactly one allocation, so that they can be left out of the
// allocations an operation is charged.
type storeBenchWorker struct {
	prefix []byte // the phase's key prefix
	buf    []byte
	keys   int // keys made
	ops    int // operations done
}

// key returns the phase's i-th key.
func (w *storeBenchWorker) key(i int) string {
	w.buf = strconv.AppendInt(append(w.buf[:0], w.prefix...), int64(i), 10)
	w.keys++
	return string(w.buf)
}

// storeBenchPhase is what one side of a case did in one round.
type storeBenchPhase struct {
	ops     int
	elapsed time.Duration
	allocs  float64 // per operation, less the keys' strings
}

// measureSide runs op on g goroutines for d (or exactly ops operations when
// ops > 0), after a garbage collection so that the phase before leaves no
// work behind. The goroutines take their operations' indices from a shared
// counter storeBenchGrain at a time, so that the counter costs a fast
// store's operations little; they stop at the next operation once d has
// passed, ctx has ended or an operation failed.
func measureSide(ctx context.Context, g int, d time.Duration, ops int, prefix string, op storeBenchOp) (storeBenchPhase, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers := make([]storeBenchWorker, g)
	var next atomic.Int64
	var stop atomic.Bool
	defer context.AfterFunc(ctx, func() { stop.Store(true) })()
	var wg sync.WaitGroup
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	if ops == 0 {
		t := time.AfterFunc(d, func() { stop.Store(true) })
		defer t.Stop()
	}
	for n := range workers {
		w := &workers[n]
		w.prefix = []byte(prefix)
		wg.Go(func() {
			for {
				first := int(next.Add(storeBenchGrain) - storeBenchGrain)
				for i := first; i < first+storeBenchGrain; i++ {
					if stop.Load() || ops > 0 && i >= ops {
						return
					}
					if err := op(ctx, w, i); err != nil {
						cancel(err)
						return
					}
					w.ops++
				}
			}
		})
	}
	wg.Wait()
	p := storeBenchPhase{elapsed: time.Since(start)}
	runtime.ReadMemStats(&after)
	if err := context.Cause(ctx); err != nil {
		return p, err
	}
	keys := 0
	for _, w := range workers {
		p.ops += w.ops
		keys += w.keys
	}
	if p.ops > 0 {
		p.allocs = float64(int(after.Mallocs-before.Mallocs)-keys) / float64(p.ops)
	}
	return p, nil
}

// storeBenchGrain is how many operation indices a goroutine of a phase
// takes at a time.
const storeBenchGrain = 16

// benchStoreRow is one case at one goroutine count: the table's row, and
// the JSON of --json.
type benchStoreRow struct {
	Case        string    `json:"case"`
	Title       string    `json:"title"`
	Goroutines  int       `json:"goroutines"`
	StoreOps    []int     `json:"store_ops,omitempty"` // one per round
	BareOps     []int     `json:"bare_ops,omitempty"`
	StoreKeysPS []float64 `json:"store_keys_per_s,omitempty"`
	BareKeysPS  []float64 `json:"bare_keys_per_s,omitempty"`
	StoreAllocs []float64 `json:"store_allocs_per_op,omitempty"`
	BareAllocs  []float64 `json:"bare_allocs_per_op,omitempty"`
	StoreWAL    []float64 `json:"store_wal_bytes_per_key,omitempty"` // PostgreSQL: the server's WAL over the phase, per key
	BareWAL     []float64 `json:"bare_wal_bytes_per_key,omitempty"`
	Ratios      []float64 `json:"ratios_pct,omitempty"` // each round's store ÷ bare, in %
}

// benchStoreReport is the JSON of --json.
type benchStoreReport struct {
	Store   string            `json:"store"`
	Server  string            `json:"server,omitempty"`
	Rounds  int               `json:"rounds"`
	Rows    []benchStoreRow   `json:"rows"`
	Memory  *storeBenchMemory `json:"memory,omitempty"`
	Started time.Time         `json:"started"`
}

// storeBenchMemory is what the server says a completed record takes.
type storeBenchMemory struct {
	Store float64 `json:"store_bytes"`
	Bare  float64 `json:"bare_bytes"`
}

// storeBenchTarget is an opened store with its cases.
type storeBenchTarget struct {
	url    string // without the password
	server string // the server's version and settings, for the report
	cases  []storeBenchCase
	memory func(ctx context.Context) (*storeBenchMemory, error) // nil when the server cannot tell
	// walPosition returns the server's WAL position in bytes, read before
	// and after each phase; nil for a server without WAL. It counts
	// whatever else writes to the server during the phase too.
	walPosition func(ctx context.Context) (int64, error)
	close       func() error
}

// benchStore opens the store, runs the rounds and writes the table (and
// the JSON) to stdout, progress to stderr.
func benchStore(ctx context.Context, o benchStoreOptions, stdout, stderr io.Writer) (report benchStoreReport, err error) {
	report = benchStoreReport{Rounds: o.rounds, Started: time.Now().UTC()}
	maxG := slices.Max(o.goroutines)
	t, err := openStoreBenchTarget(ctx, o.store, maxG)
	if err != nil {
		return report, err
	}
	defer func() { err = errors.Join(err, t.close()) }()
	report.Store, report.Server = t.url, t.server

	var cases []storeBenchCase
	for _, c := range t.cases {
		if len(o.cases) == 0 || slices.Contains(o.cases, c.name) {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		return report, usageErrorf("idem-bench: --cases %s: none of them applies to %s", strings.Join(o.cases, ","), t.url)
	}
	for _, c := range cases {
		for _, g := range o.goroutines {
			report.Rows = append(report.Rows, benchStoreRow{Case: c.name, Title: c.title, Goroutines: g})
		}
	}

	phase := 0
	for round := range o.rounds {
		fmt.Fprintf(stderr, "idem-bench store: round %d of %d\n", round+1, o.rounds)
		row := 0
		for _, c := range cases {
			for _, g := range o.goroutines {
				r := &report.Rows[row]
				row++
				sides := o.sides
				if round%2 == 1 {
					sides = slices.Clone(sides)
					slices.Reverse(sides)
				}
				for _, side := range sides {
					phase++
					prefix := fmt.Sprintf("order-%d-%d-", report.Started.UnixNano(), phase)
					if err := runStoreSide(ctx, o, t, c, g, side, prefix, r); err != nil {
						return report, err
					}
				}
				if len(r.StoreKeysPS) == round+1 && len(r.BareKeysPS) == round+1 && r.BareKeysPS[round] > 0 {
					r.Ratios = append(r.Ratios, 100*r.StoreKeysPS[round]/r.BareKeysPS[round])
				}
			}
		}
	}
	if t.memory != nil && len(o.sides) == 2 {
		if report.Memory, err = t.memory(ctx); err != nil {
			return report, fmt.Errorf("idem-bench: store: memory per record: %w", err)
		}
	}
	return report, writeStoreResults(stdout, stderr, o, report)
}

// runStoreSide runs one side of case c on g goroutines, its keys named
// after prefix, and adds what it measured to row r.
func runStoreSide(ctx context.Context, o benchStoreOptions, t *storeBenchTarget, c storeBenchCase, g int, side, prefix string, r *benchStoreRow) error {
	ready, ops, rates, allocs, wal := c.store, &r.StoreOps, &r.StoreKeysPS, &r.StoreAllocs, &r.StoreWAL
	if side == "bare" {
		ready, ops, rates, allocs, wal = c.bare, &r.BareOps, &r.BareKeysPS, &r.BareAllocs, &r.BareWAL
	}
	op, release, err := ready(ctx, g)
	if err != nil {
		return fmt.Errorf("idem-bench: store: %s, %s side: %w", c.name, side, err)
	}
	var walStart, walEnd int64
	if t.walPosition != nil {
		walStart, err = t.walPosition(ctx)
	}
	var p storeBenchPhase
	if err == nil {
		p, err = measureSide(ctx, g, o.duration, o.ops, prefix, op)
	}
	if err == nil && t.walPosition != nil {
		walEnd, err = t.walPosition(ctx)
	}
	release()
	if err != nil {
		return fmt.Errorf("idem-bench: store: %s on %d goroutines, %s side: %w", c.name, g, side, err)
	}
	*ops = append(*ops, p.ops)
	*rates = append(*rates, float64(p.ops*c.keys)/p.elapsed.Seconds())
	*allocs = append(*allocs, p.allocs)
	if t.walPosition != nil && p.ops > 0 {
		*wal = append(*wal, float64(walEnd-walStart)/float64(p.ops*c.keys))
	}
	return nil
}

// writeStoreResults writes the table, and the JSON of --json and --report.
func writeStoreResults(stdout, stderr io.Writer, o benchStoreOptions, report benchStoreReport) error {
	writeBenchStoreTable(stdout, report, o)
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	}
	if o.report != "" {
		return writeStoreReport(o.report, report, stderr)
	}
	return nil
}

// median returns the median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func writeBenchStoreTable(w io.Writer, r benchStoreReport, o benchStoreOptions) {
	host, _ := os.Hostname()
	cpu := cpuModel()
	fmt.Fprintf(w, "date: %s  cpu: %s  cores: %d  %s  host: %s\n", r.Started.Format("2006-01-02T15:04Z"), cpu, runtime.NumCPU(), runtime.Version(), host)
	fmt.Fprintf(w, "store: %s", r.Store)
	if r.Server != "" {
		fmt.Fprintf(w, "  server: %s", r.Server)
	}
	per := o.duration.String() + " per side"
	if o.ops > 0 {
		per = strconv.Itoa(o.ops) + " operations per side"
	}
	rounds := fmt.Sprintf("%d rounds", r.Rounds)
	if r.Rounds == 1 {
		rounds = "1 round"
	}
	fmt.Fprintf(w, "\n%s, %s; medians of the rounds; ratio: the median of the rounds' own store ÷ bare\n\n", rounds, per)
	width := len("case")
	for _, row := range r.Rows {
		width = max(width, len(row.Title))
	}
	// Right-aligned numbers; the cases are padded so they read left-aligned.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tgoroutines\tstore keys/s\tbare keys/s\tratio\tstore allocs/op\tbare allocs/op\t  each round's ratio\t\n", width, "case")
	for _, row := range r.Rows {
		ratio, rounds := "-", ""
		if len(row.Ratios) > 0 {
			ratio = fmt.Sprintf("%.0f%%", median(row.Ratios))
			for _, x := range row.Ratios {
				rounds += fmt.Sprintf(" %.0f", x)
			}
		}
		fmt.Fprintf(tw, "%-*s\t%d\t%s\t%s\t%s\t%s\t%s\t %s\t\n", width, row.Title, row.Goroutines,
			medianOf(row.StoreKeysPS, "%.0f"), medianOf(row.BareKeysPS, "%.0f"), ratio,
			medianOf(row.StoreAllocs, "%.1f"), medianOf(row.BareAllocs, "%.1f"), rounds)
	}
	tw.Flush()
	if slices.ContainsFunc(r.Rows, func(row benchStoreRow) bool { return len(row.StoreWAL) > 0 }) {
		fmt.Fprintf(w, "\nthe server's WAL bytes per key, medians of the rounds (all of the server's WAL, whoever wrote it):\n\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%-*s\tgoroutines\tstore WAL B/key\tbare WAL B/key\t\n", width, "case")
		for _, row := range r.Rows {
			fmt.Fprintf(tw, "%-*s\t%d\t%s\t%s\t\n", width, row.Title, row.Goroutines, medianOf(row.StoreWAL, "%.1f"), medianOf(row.BareWAL, "%.1f"))
		}
		tw.Flush()
	}
	if m := r.Memory; m != nil {
		fmt.Fprintf(w, "\nmemory per completed record (the server's MEMORY USAGE): store %.0f bytes, bare %.0f bytes\n", m.Store, m.Bare)
	}
	fmt.Fprint(w, `
keys/s: keys per second of the phase's wall time (a batch of 100 is 100 keys, a Do one);
allocs/op: the client's heap allocations per operation, all goroutines, less the keys' strings;
ratio: store keys/s ÷ bare keys/s of the same round, median of the rounds, then each round's in %
`)
}

func medianOf(xs []float64, format string) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf(format, median(xs))
}

// cpuModel returns the CPU's model name from /proc/cpuinfo, or the
// architecture where there is none.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for line := range strings.Lines(string(b)) {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				_, v, _ := strings.Cut(name, ":")
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}

// benchURL parses a --store URL, refusing the options the benchmark sets
// itself.
func benchURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return nil, usageErrorf("idem-bench: --store %s: not a store URL (want mem://, redis://… or postgres://…)", storeurl.Redact(raw))
	}
	if u.Query().Has("table") {
		return nil, usageErrorf("idem-bench: store: --store %s: no ?table=: the benchmark's tables go in a schema of its own", storeurl.Redact(u.String()))
	}
	return u, nil
}
