package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
)

// benchHTTPOptions are the flags of idem-bench http.
type benchHTTPOptions struct {
	duration time.Duration // of each row
	clients  int
	sleep    time.Duration
	repeat   float64
	rounds   int
	stores   []string
	bare     bool
	json     bool
	report   string // a directory for the run's JSON and chart
}

// benchRetention is the Retention of the benchmark's records. They serve
// the run only: a short one lets Redis expire them and idem reap delete
// them from PostgreSQL soon after.
const benchRetention = 10 * time.Minute

// benchBody is the body of every request. The middleware fingerprints it
// with the method and path, so a repeated key must come with the same one.
var benchBody = []byte(`{"customer":"cus_4242","amount":1999,"currency":"eur"}`)

// defaultBenchStores lists one store of each kind, at the servers the
// integration tests use, named by the same environment variables.
func defaultBenchStores() string {
	redisAddr := cmp.Or(os.Getenv("IDEM_REDIS_ADDR"), "127.0.0.1:6379")
	pgURL := cmp.Or(os.Getenv("IDEM_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	return "mem://,redis://" + redisAddr + "/0," + pgURL
}

func parseBenchHTTPFlags(args []string, stderr io.Writer) (benchHTTPOptions, error) {
	var (
		o      benchHTTPOptions
		stores string
	)
	fs := flag.NewFlagSet("http", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long each row's load runs, in all its rounds")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds each row's load is split into; every round runs each row of a pass once, in turn")
	fs.IntVar(&o.clients, "clients", 50, "concurrent clients; each sends its next request when the last is answered")
	fs.DurationVar(&o.sleep, "sleep", 50*time.Millisecond, "how long the handler works (sleeps) per request")
	fs.BoolVar(&o.bare, "bare", true, "after each Redis or PostgreSQL row, a bare row: its server's two writes per request without idem (fresh pass only)")
	fs.Float64Var(&o.repeat, "repeat", 0.3, "share of the repeat pass's requests that resend an answered request's key, in [0, 1); 0 skips that pass")
	fs.StringVar(&stores, "stores", defaultBenchStores(), "comma-separated URLs of the stores to measure; \"\" for the baseline alone")
	fs.BoolVar(&o.json, "json", false, "also print the results as JSON, after the table")
	fs.StringVar(&o.report, "report", "", reportUsage)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: idem-bench http [flags]

Serves a POST handler that sleeps --sleep and answers a small JSON body on
a loopback port and drives it with --clients concurrent clients (vegeta, in
a closed loop) for --duration per row: first bare (the baseline), then
behind idemhttp over each of --stores, each in a fresh namespace. Each
row's load is split into --rounds rounds, and every round runs each row of
the pass once, in turn, so that a machine whose speed drifts weighs on
every row alike. Every row runs in two passes: "fresh" sends a new Idempotency-Key with each request;
"repeat" resends, with a share --repeat of its requests, the key of a
request already answered, which the middleware replays.

The table shows each row's requests, 2xx responses per second, latency
(mean, p50, p95, p99), errors (responses other than 2xx, failed requests),
repeats and replays, and its cost against the baseline of the same pass.
A store that cannot be reached, or a row with errors, fails the command
(status 1), the latter once the table is printed.

The default --stores come from IDEM_REDIS_ADDR (host:port, default
127.0.0.1:6379) and IDEM_POSTGRES_URL (default
postgres://postgres@127.0.0.1:5432/test?sslmode=disable). PostgreSQL's
records table is created if missing (see idem migrate). Each store's
connection pool gets one connection per client unless its URL sets
pool_max_conns (PostgreSQL) or pool_size (Redis).

Flags:
`)
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nEach URL of --stores is %s.\n", storeUsage)
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	switch {
	case o.duration <= 0:
		return o, usageErrorf("idem-bench: --duration %v: must be positive", o.duration)
	case o.clients < 1:
		return o, usageErrorf("idem-bench: --clients %d: must be at least 1", o.clients)
	case o.rounds < 1:
		return o, usageErrorf("idem-bench: --rounds %d: must be at least 1", o.rounds)
	case o.duration/time.Duration(o.rounds) < 10*time.Millisecond:
		return o, usageErrorf("idem-bench: --duration %v: too short for %d rounds (at least 10ms a round)", o.duration, o.rounds)
	case o.sleep < 0:
		return o, usageErrorf("idem-bench: --sleep %v: must not be negative", o.sleep)
	case !(o.repeat >= 0 && o.repeat < 1):
		return o, usageErrorf("idem-bench: --repeat %v: must be at least 0 and below 1", o.repeat)
	}
	if strings.TrimSpace(stores) != "" {
		for s := range strings.SplitSeq(stores, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				return o, usageErrorf("idem-bench: --stores %q: an empty entry", stores)
			}
			o.stores = append(o.stores, s)
		}
	}
	return o, nil
}

func runBenchHTTP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseBenchHTTPFlags(args, stderr)
	if err != nil {
		return err
	}
	_, err = benchHTTP(ctx, o, stdout, stderr)
	return err
}

// benchTarget is what a row measures: the bare handler (store nil) or the
// handler behind idemhttp over one store.
type benchTarget struct {
	name     string // the row's label
	url      string // the store's URL without its password
	store    storage.Store
	bare     bareStore // a bare row: the store's writes without idem
	baseline bool
}

// benchPass is one way of choosing the requests' keys.
type benchPass struct {
	name   string
	repeat float64 // share of requests that resend an answered key
}

// benchRow is one row of the table: one target under one pass. It is also
// the JSON of --json, so its latencies are in milliseconds.
type benchRow struct {
	Store    string `json:"store"`
	URL      string `json:"url,omitempty"`
	Pass     string `json:"pass"`
	Requests uint64 `json:"requests"`
	Errors   uint64 `json:"errors"`  // responses other than 2xx, and failed requests
	Repeats  uint64 `json:"repeats"` // requests that resent a key
	Replays  uint64 `json:"replays"` // responses with Idempotent-Replayed: true
	// ReqPerSec is the 2xx responses per second of the row's wall time, so
	// that a store failing fast cannot look quick.
	ReqPerSec float64 `json:"req_per_s"`
	MeanMS    float64 `json:"mean_ms"`
	P50MS     float64 `json:"p50_ms"`
	P95MS     float64 `json:"p95_ms"`
	P99MS     float64 `json:"p99_ms"`
	MaxMS     float64 `json:"max_ms"`
	// RatePct is ReqPerSec as a percentage of the same pass's baseline,
	// P99DiffMS the p99 latency over the baseline's.
	RatePct     float64        `json:"req_per_s_vs_baseline_pct"`
	P99DiffMS   float64        `json:"p99_vs_baseline_ms"`
	StatusCodes map[string]int `json:"status_codes"`
	ErrorSample []string       `json:"error_sample,omitempty"` // a few distinct errors

	baseline bool
}

// benchHTTP opens the stores, runs every row and writes the table (and the
// JSON) to stdout, progress to stderr. It fails when a store cannot be
// opened, ctx ends, or a row had errors; the rows are returned anyway.
func benchHTTP(ctx context.Context, o benchHTTPOptions, stdout, stderr io.Writer) (rows []benchRow, err error) {
	// Every store is opened before any load runs, so one that cannot be
	// reached fails the command at once rather than minutes in.
	runID := time.Now().UnixNano()
	targets, closeTargets, err := openHTTPTargets(ctx, o, runID)
	defer func() { err = errors.Join(err, closeTargets()) }() // err: the result
	if err != nil {
		return nil, err
	}
	passes := []benchPass{{name: "fresh"}}
	if o.repeat > 0 {
		passes = append(passes, benchPass{name: "repeat", repeat: o.repeat})
	}
	writeHTTPHeader(stdout, o, targets)

	// Each row's load runs in rounds, and every round runs each row of the
	// pass once, in turn: on a shared machine whose speed drifts, the drift
	// then falls on every row alike instead of on whichever ran last.
	round := o.duration / time.Duration(o.rounds)
	for _, p := range passes {
		accs := make([]rowAcc, len(targets))
		for r := range o.rounds {
			fmt.Fprintf(stderr, "idem-bench http: %s pass, round %d of %d, %v per row\n", p.name, r+1, o.rounds, round)
			for i, t := range targets {
				if t.bare != nil && p.repeat > 0 {
					continue // a bare row replays nothing: it has no repeat pass
				}
				ns := fmt.Sprintf("idem-bench-http/%d/%s/%s/%d", runID, t.name, p.name, r)
				if err := benchHTTPRound(ctx, o, t, p, ns, round, &accs[i]); err != nil {
					return rows, err
				}
			}
		}
		for i, t := range targets {
			if t.bare != nil && p.repeat > 0 {
				continue
			}
			rows = append(rows, accs[i].row(t, p))
		}
	}
	compareToBaseline(rows)
	return rows, writeHTTPResults(stdout, stderr, o, rows)
}

// openHTTPTargets opens the stores of o, and their bare rows with o.bare,
// and returns the targets, the baseline first, with the function that
// closes what it opened (it closes it at once when it fails).
func openHTTPTargets(ctx context.Context, o benchHTTPOptions, runID int64) (targets []benchTarget, closeAll func() error, err error) {
	var closers []func() error
	closeAll = func() error {
		var errs []error
		for _, c := range slices.Backward(closers) {
			errs = append(errs, c())
		}
		closers = nil
		return errors.Join(errs...)
	}
	targets = []benchTarget{{name: "baseline", baseline: true}}
	taken := map[string]bool{"baseline": true}
	for _, raw := range o.stores {
		s, closeStore, err := openStore(ctx, withPoolSize(raw, o.clients))
		if err != nil {
			return nil, closeAll, err
		}
		closers = append(closers, closeStore)
		name, shown := targetName(raw)
		t := benchTarget{name: name, url: shown, store: s}
		if taken[t.name] {
			t.name = t.url
		}
		taken[t.name] = true
		targets = append(targets, t)
		if !o.bare {
			continue
		}
		bare, err := openBare(ctx, withPoolSize(raw, o.clients), runID)
		if err != nil {
			return nil, closeAll, err
		}
		if bare != nil {
			closers = append(closers, bare.close)
			targets = append(targets, benchTarget{name: t.name + ", bare", url: t.url, bare: bare})
		}
	}
	return targets, closeAll, nil
}

// targetName returns the name of the store of raw in the table, its
// scheme, and its URL as shown, without its password.
func targetName(raw string) (name, shown string) {
	u, err := url.Parse(raw)
	if err != nil { // openStore parsed it
		return raw, raw
	}
	name, shown = u.Scheme, raw
	if _, ok := u.User.Password(); ok {
		shown = storeurl.Redact(u.String())
	}
	switch u.Scheme {
	case "rediss":
		name = "redis"
	case "postgresql":
		name = "postgres"
	}
	return name, shown
}

// writeHTTPHeader writes what the run does, and what each target is.
func writeHTTPHeader(stdout io.Writer, o benchHTTPOptions, targets []benchTarget) {
	fmt.Fprintf(stdout, "idem-bench http: POST to a handler that sleeps %v, %d clients in a closed loop (vegeta), %v per row\n",
		o.sleep, o.clients, o.duration)
	fmt.Fprint(stdout, "passes: fresh sends a new Idempotency-Key with every request")
	if o.repeat > 0 {
		fmt.Fprintf(stdout, "; repeat resends, with %.0f%% of its requests, the key of an answered request", o.repeat*100)
	}
	fmt.Fprintln(stdout)
	for _, t := range targets[1:] {
		if t.bare != nil {
			fmt.Fprintf(stdout, "%s: the same server's bare writes per request, a claim before the handler and the outcome after it, without idem\n", t.name)
			continue
		}
		fmt.Fprintf(stdout, "%s: idemhttp over %s\n", t.name, t.url)
	}
}

// writeHTTPResults writes the table, the errors of each row, and the JSON
// of --json and --report, and fails when a row had errors.
func writeHTTPResults(stdout, stderr io.Writer, o benchHTTPOptions, rows []benchRow) error {
	fmt.Fprintln(stdout)
	writeBenchTable(stdout, rows)
	var failed, total uint64
	for _, r := range rows {
		total += r.Requests
		if r.Errors == 0 {
			continue
		}
		failed += r.Errors
		fmt.Fprintf(stdout, "%s, %s pass: %d errors; status codes %v", r.Store, r.Pass, r.Errors, r.StatusCodes)
		if len(r.ErrorSample) > 0 {
			fmt.Fprintf(stdout, "; %s", strings.Join(r.ErrorSample, "; "))
		}
		fmt.Fprintln(stdout)
	}
	report := benchHTTPReport{o.duration.Seconds(), o.clients, ms(o.sleep), o.repeat, rows}
	if o.json {
		b, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\n%s\n", b)
	}
	if o.report != "" {
		if err := writeHTTPReport(o.report, report, stderr); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("idem-bench: http: %d of %d requests were not answered 2xx (see the table): those rows do not measure what they claim", failed, total)
	}
	return nil
}

// benchHTTPReport is the JSON of --json and --report.
type benchHTTPReport struct {
	DurationS float64    `json:"duration_s"`
	Clients   int        `json:"clients"`
	SleepMS   float64    `json:"sleep_ms"`
	Repeat    float64    `json:"repeat"`
	Rows      []benchRow `json:"rows"`
}

// rowAcc adds up a row's rounds.
type rowAcc struct {
	m                        vegeta.Metrics // latencies and status codes of every round
	errors, repeats, replays uint64
	wall                     time.Duration // the rounds' wall time, without the pauses between them
}

// row returns the row of t under p, without its comparison to the
// baseline.
func (a *rowAcc) row(t benchTarget, p benchPass) benchRow {
	a.m.Close()
	r := benchRow{Store: t.name, URL: t.url, Pass: p.name, baseline: t.baseline,
		Requests: a.m.Requests, Errors: a.errors, Repeats: a.repeats, Replays: a.replays}
	if w := a.wall.Seconds(); w > 0 {
		r.ReqPerSec = float64(a.m.Requests-a.errors) / w
	}
	r.MeanMS, r.P50MS, r.P95MS, r.P99MS, r.MaxMS = ms(a.m.Latencies.Mean), ms(a.m.Latencies.P50),
		ms(a.m.Latencies.P95), ms(a.m.Latencies.P99), ms(a.m.Latencies.Max)
	r.StatusCodes = a.m.StatusCodes
	r.ErrorSample = a.m.Errors[:min(len(a.m.Errors), 3)]
	return r
}

// benchHTTPRound serves t's handler in a fresh namespace, drives it for d
// and adds what it measured to acc.
func benchHTTPRound(ctx context.Context, o benchHTTPOptions, t benchTarget, p benchPass, namespace string, d time.Duration, acc *rowAcc) error {
	h, closeGuard, err := benchHTTPHandler(o, t, namespace)
	if err != nil {
		return err
	}
	defer closeGuard()
	target, stopServer, err := serveBench(h)
	if err != nil {
		return err
	}
	defer stopServer()

	// A transport of our own keeps one connection per client alive (net/http
	// keeps 2 per host by default) and is closed with the row, so no row
	// inherits another's connections.
	tr := &http.Transport{MaxIdleConnsPerHost: o.clients, DisableCompression: true}
	defer tr.CloseIdleConnections()
	n := uint64(o.clients)
	atk := vegeta.NewAttacker(
		vegeta.Client(&http.Client{Transport: tr, Timeout: vegeta.DefaultTimeout}),
		vegeta.Workers(n), vegeta.MaxWorkers(n),
	)
	defer context.AfterFunc(ctx, func() { atk.Stop() })()

	var (
		pool    keyPool
		repeats atomic.Uint64
	)
	targeter := keyTargeter(target, p, &pool, &repeats)

	// Metrics keeps the latencies in a t-digest; only the counts of
	// replays and errors are ours, since they need the status and headers.
	// Freq 0 with as many workers as clients is vegeta's closed loop: each
	// worker sends its next request as soon as its last is answered.
	var m vegeta.Metrics
	for res := range atk.Attack(targeter, vegeta.Rate{Freq: 0}, d, t.name+"/"+p.name) {
		m.Add(res)
		acc.m.Add(res)
		if res.Code < 200 || res.Code > 299 {
			acc.errors++
			continue
		}
		if res.Headers.Get(idemhttp.ReplayedHeader) == "true" {
			acc.replays++
		}
		pool.add(res.Headers.Get(idemhttp.DefaultHeader))
	}
	m.Close()
	if ctx.Err() != nil {
		return fmt.Errorf("idem-bench: http interrupted: %w", context.Cause(ctx))
	}
	acc.repeats += repeats.Load()
	acc.wall += m.Duration + m.Wait
	return nil
}

// benchHTTPHandler returns the handler of t's row, serving in namespace,
// and the function that closes its Guard.
func benchHTTPHandler(o benchHTTPOptions, t benchTarget, namespace string) (http.Handler, func(), error) {
	h := benchHandler(o.sleep)
	switch {
	case t.bare != nil:
		return bareMiddleware(t.bare, namespace, h), func() {}, nil
	case t.baseline:
		return h, func() {}, nil
	}
	// Wait stays 0: a request whose key is in progress gets 409 at once,
	// and shows in the errors column. The repeat pass never sends one (see
	// keyPool), so a 409 would be a fault of the benchmark, which waiting
	// would hide as latency.
	g, err := idem.New(t.store, idem.Config{Namespace: namespace, Retention: benchRetention})
	if err != nil {
		return nil, nil, err
	}
	mw, err := idemhttp.New(g, idemhttp.WithSharedScope()) // one load generator: one caller
	if err != nil {
		g.Close()
		return nil, nil, err
	}
	return mw(h), func() { g.Close() }, nil
}

// keyTargeter returns the targeter of a row of pass p: a POST to target
// with a new key, or, with probability p.repeat, the key of an answered
// request from pool, counted in repeats.
func keyTargeter(target string, p benchPass, pool *keyPool, repeats *atomic.Uint64) vegeta.Targeter {
	var seq atomic.Uint64
	return func(tgt *vegeta.Target) error {
		var key string
		if p.repeat > 0 && rand.Float64() < p.repeat {
			if k, ok := pool.pick(); ok {
				key = k
				repeats.Add(1)
			}
		}
		if key == "" {
			key = "k" + strconv.FormatUint(seq.Add(1), 10)
		}
		*tgt = vegeta.Target{
			Method: http.MethodPost,
			URL:    target,
			Body:   benchBody,
			Header: http.Header{"Content-Type": {"application/json"}, idemhttp.DefaultHeader: {key}},
		}
		return nil
	}
}

// withPoolSize returns the store URL raw with its connection pool sized to
// the clients, unless raw sizes it itself. The drivers' defaults are sized
// to the cores (pgx: max(4, cores) connections), and a row measuring 50
// clients queueing for 4 connections would measure the pool, not the
// store. An URL that does not parse is returned as is, for openStore to
// refuse.
func withPoolSize(raw string, clients int) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	var param string
	switch u.Scheme {
	case "postgres", "postgresql":
		param = "pool_max_conns"
	case "redis", "rediss":
		param = "pool_size"
	default:
		return raw
	}
	q := u.Query()
	if q.Has(param) {
		return raw
	}
	q.Set(param, strconv.Itoa(clients))
	u.RawQuery = q.Encode()
	return u.String()
}

// keyPool holds the keys of the requests answered with 2xx, from which the
// repeat pass picks the keys it resends: a client's retry after its answer
// was lost, or a double submit after the first went through.
//
// The middleware stores the outcome before net/http sends the response
// (the handler neither flushes nor outgrows net/http's write buffer), so a
// key in the pool is one the store holds as completed, and its repeat is
// replayed rather than refused with 409 as a concurrent duplicate would be.
type keyPool struct {
	mu   sync.Mutex
	keys []string
	in   map[string]bool
}

// add puts key in the pool once; "" (a response without it) is ignored.
func (p *keyPool) add(key string) {
	if key == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.in == nil {
		p.in = make(map[string]bool)
	}
	if !p.in[key] {
		p.in[key] = true
		p.keys = append(p.keys, key)
	}
}

// pick returns a key of the pool chosen uniformly, or false while it is
// empty (the pass's first requests).
func (p *keyPool) pick() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.keys) == 0 {
		return "", false
	}
	return p.keys[rand.IntN(len(p.keys))], true
}

// benchHandler is the handler under test: it stands for work that takes
// sleep (a payment provider's call, say) and answers a small JSON body.
// It echoes the Idempotency-Key, as Stripe's API does, which is how the
// load generator learns which key a response answers; a replay carries it
// too, as a stored header.
func benchHandler(sleep time.Duration) http.Handler {
	var orders atomic.Uint64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, "cannot read the body", http.StatusBadRequest)
			return
		}
		timer := time.NewTimer(sleep)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.Context().Done():
			http.Error(w, "request cancelled", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if key := r.Header.Get(idemhttp.DefaultHeader); key != "" {
			w.Header().Set(idemhttp.DefaultHeader, key)
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":"ord_%d","status":"created"}`+"\n", orders.Add(1))
	})
}

// serveBench serves h on a loopback port and returns the URL to post to
// and the function that shuts the server down.
func serveBench(h http.Handler) (target string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("idem-bench: http: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln) // returns ErrServerClosed once stop runs
	}()
	return "http://" + ln.Addr().String() + "/orders", func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		<-done
	}, nil
}

// compareToBaseline fills in each row's cost against the baseline row of
// its pass.
func compareToBaseline(rows []benchRow) {
	base := map[string]benchRow{}
	for _, r := range rows {
		if r.baseline {
			base[r.Pass] = r
		}
	}
	for i, r := range rows {
		b, ok := base[r.Pass]
		if !ok {
			continue
		}
		if b.ReqPerSec > 0 {
			rows[i].RatePct = 100 * r.ReqPerSec / b.ReqPerSec
		}
		rows[i].P99DiffMS = r.P99MS - b.P99MS
	}
}

// writeBenchTable writes the rows under their header, then what the
// columns mean.
func writeBenchTable(w io.Writer, rows []benchRow) {
	width := 0
	for _, r := range rows {
		width = max(width, len(r.Store))
	}
	// Right-aligned numbers; the names are padded so they read left-aligned.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tpass\trequests\treq/s\tmean\tp50\tp95\tp99\terrors\trepeats\treplays\treq/s vs baseline\tp99 vs baseline\t\n", width, "store")
	for _, r := range rows {
		rate, p99 := "-", "-"
		if !r.baseline {
			rate, p99 = fmt.Sprintf("%.1f%%", r.RatePct), fmt.Sprintf("%+.2fms", r.P99DiffMS)
		}
		fmt.Fprintf(tw, "%-*s\t%s\t%d\t%.1f\t%.2fms\t%.2fms\t%.2fms\t%.2fms\t%d\t%d\t%d\t%s\t%s\t\n", width, r.Store, r.Pass,
			r.Requests, r.ReqPerSec, r.MeanMS, r.P50MS, r.P95MS, r.P99MS, r.Errors, r.Repeats, r.Replays, rate, p99)
	}
	tw.Flush()
	fmt.Fprint(w, `
req/s: 2xx responses per second; latency: each request's, as its client saw it; errors: responses other
than 2xx and failed requests; repeats: requests that resent an answered request's key (the baseline runs
them again); replays: responses with Idempotent-Replayed: true; vs baseline: the same pass without idemhttp
(a replay skips the handler's work, so a repeat row may answer faster than its baseline); a bare row: the
same server's two writes per request, a claim and the outcome, without idem: the limit of the row above it
`)
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
