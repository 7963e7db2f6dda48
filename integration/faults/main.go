package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "consume" {
		os.Exit(consumeMain())
	}
	os.Exit(harnessMain(os.Args[1:], os.Stdout))
}

// harnessMain runs the suite with the command line args; its exit code.
func harnessMain(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("faults", flag.ContinueOnError)
	profileName := fs.String("profile", "full", "the runs: short (make test) or full (make faults)")
	brokerList := fs.String("brokers", strings.Join(slices.Sorted(maps.Keys(brokers)), ","), "the brokers to run, comma-separated")
	only := fs.String("run", "", "run only the configurations whose name matches this regular expression")
	broken := fs.String("broken", "", "run a broken consumer: "+brokenAckFirst+", "+brokenNoFence+" or "+brokenOutsideTx+" (the suite must fail)")
	md := fs.String("md", "", "also write the table of runs, in Markdown, to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var names []string
	for _, b := range strings.Split(*brokerList, ",") {
		if b = strings.TrimSpace(b); b != "" {
			names = append(names, b)
		}
	}
	cfgs, err := profile(*profileName, names)
	rs := runs{broker: cfgs, failover: failoverProfile(*profileName), partition: partitionProfile(*profileName)}
	if err == nil && *only != "" {
		var re *regexp.Regexp
		if re, err = regexp.Compile(*only); err == nil {
			rs = rs.matching(re)
		}
	}
	if err != nil {
		fmt.Fprintln(out, "faults:", err)
		return 2
	}
	for i := range rs.broker {
		rs.broker[i].Broken = *broken
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(out, "faults:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := runSuite(ctx, []string{exe, "consume"}, rs, out)
	if err != nil {
		fmt.Fprintln(out, "faults:", err)
		return 1
	}
	if *md != "" {
		if err := os.WriteFile(*md, []byte(res.markdown()), 0o644); err != nil {
			fmt.Fprintln(out, "faults:", err)
			return 1
		}
	}
	if res.failed() > 0 {
		return 1
	}
	return 0
}

// runs are what a suite runs: the broker runs, then the failover runs,
// then the partition runs.
type runs struct {
	broker    []runConfig
	failover  []failoverConfig
	partition []partitionConfig
}

// matching keeps the runs whose name matches re.
func (rs runs) matching(re *regexp.Regexp) runs {
	rs.broker = slices.DeleteFunc(rs.broker, func(c runConfig) bool { return !re.MatchString(c.Name) })
	rs.failover = slices.DeleteFunc(rs.failover, func(c failoverConfig) bool { return !re.MatchString(c.Name) })
	rs.partition = slices.DeleteFunc(rs.partition, func(c partitionConfig) bool { return !re.MatchString(c.Name) })
	return rs
}

// results are the reports of a suite's runs.
type results struct {
	broker    []*report
	failover  []*failoverReport
	partition []*partitionReport
}

// failed counts the runs that failed.
func (res results) failed() int {
	return countFailed(res.broker) + countFailed(res.failover) + countFailed(res.partition)
}

func countFailed[R interface{ ok() bool }](rs []R) int {
	n := 0
	for _, r := range rs {
		if !r.ok() {
			n++
		}
	}
	return n
}

// runSuite runs rs one after another, the broker runs with consumers
// started by consumerCmd, printing each report as it comes.
func runSuite(ctx context.Context, consumerCmd []string, rs runs, out io.Writer) (results, error) {
	var res results
	pgURL := envOr("IDEM_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	db, err := pgPool(ctx, pgURL, "idemfaults-harness", 20)
	if err != nil {
		return res, fmt.Errorf("PostgreSQL at %s (IDEM_POSTGRES_URL): %w", pgURL, err)
	}
	defer db.Close()
	dir, err := os.MkdirTemp("", "idemfaults-")
	if err != nil {
		return res, err
	}
	defer func() {
		if os.Getenv("IDEMFAULTS_KEEP") == "" {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintf(out, "files kept in %s\n", dir)
		}
	}()
	h := &harness{consumerCmd: consumerCmd, pgURL: pgURL, dir: dir, out: out, db: db}
	start := time.Now()
	for _, cfg := range rs.broker {
		rep, err := h.runOne(ctx, cfg)
		if err != nil {
			return res, fmt.Errorf("%s: %w", cfg.Name, err)
		}
		fmt.Fprintln(out, rep.line())
		res.broker = append(res.broker, rep)
	}
	for _, cfg := range rs.failover {
		rep, err := h.runFailover(ctx, cfg)
		if err != nil {
			return res, fmt.Errorf("%s: %w", cfg.Name, err)
		}
		fmt.Fprintln(out, rep.line())
		res.failover = append(res.failover, rep)
	}
	for _, cfg := range rs.partition {
		rep, err := h.runPartition(ctx, cfg)
		if err != nil {
			return res, fmt.Errorf("%s: %w", cfg.Name, err)
		}
		fmt.Fprintln(out, rep.line())
		res.partition = append(res.partition, rep)
	}
	n := len(res.broker) + len(res.failover) + len(res.partition)
	fmt.Fprintf(out, "%d runs, %d failed, in %v\n", n, res.failed(), time.Since(start).Round(time.Second))
	return res, nil
}

// markdown is the tables of FAULTS.md.
func (res results) markdown() string {
	var b strings.Builder
	if len(res.broker) > 0 {
		b.WriteString(markdownHeader)
	}
	for _, r := range res.broker {
		b.WriteString(r.markdownRow())
	}
	if len(res.failover) > 0 {
		b.WriteString("\n" + failoverHeader)
	}
	for _, r := range res.failover {
		b.WriteString(r.markdownRow())
	}
	if len(res.partition) > 0 {
		b.WriteString("\n" + partitionHeader)
	}
	for _, r := range res.partition {
		b.WriteString(r.markdownRow())
	}
	b.WriteString("\n")
	for _, r := range res.broker {
		if r.LossWindow != "" {
			fmt.Fprintf(&b, "- `%s`: %s.\n", r.cfg.Name, r.LossWindow)
		}
	}
	return b.String()
}

func envOr(name, def string) string { return cmp.Or(os.Getenv(name), def) }

// profile returns the runs of the named profile on the brokers given.
//
// Every broker gets the same stores and modes: pgstore's transactional
// mode (on Kafka, kafkapg: the offset commits in the same transaction) and
// Redis (on a server that loses everything in a restart) with a
// fenced side effect and memstore with a fenced side effect, which must
// show exactly one effect per message; pgstore and Redis (appendfsync
// always) with an unfenced side effect, whose duplicates must each follow
// a kill or store fault in the window between effect and outcome; and
// Redis without appendonly, and with appendfsync everysec, unfenced, whose
// restarts lose outcomes: the loss is measured and its duplicates are
// allowed for the keys it lost. On Kafka, whose cluster is the harness's
// own, every run also crashes the node leading a partition (BrokerKills).
func profile(name string, brokerNames []string) ([]runConfig, error) {
	var base runConfig
	var stores []runConfig
	switch name {
	case "short":
		base = runConfig{Consumers: 3, Messages: 80, Duplicates: 0.25, KillsPerPoint: 1, RandomKills: 1, BrokerKills: 1,
			Lease: time.Second, PublishOver: 4 * time.Second, Timeout: 90 * time.Second}
		stores = []runConfig{
			{Name: "pgtx-tx", Store: storePGTx, Mode: modeTx, Expect: expectExactlyOnce, PGTerminates: 1, BrokerDrops: 1},
			{Name: "redis-noaof-fenced", Store: storeRedis, Mode: modeFenced, Expect: expectExactlyOnce, RedisRestarts: 1},
			{Name: "pg-unfenced", Store: storePG, Mode: modeUnfenced, Expect: expectBounded, PGTerminates: 1},
		}
	case "full":
		base = runConfig{Consumers: 3, Messages: 400, Duplicates: 0.25, KillsPerPoint: 3, RandomKills: 4, BrokerKills: 2,
			Lease: time.Second, PublishOver: 15 * time.Second, Timeout: 3 * time.Minute}
		stores = []runConfig{
			{Name: "pgtx-tx", Store: storePGTx, Mode: modeTx, Expect: expectExactlyOnce, PGTerminates: 3, BrokerDrops: 2},
			{Name: "pg-unfenced", Store: storePG, Mode: modeUnfenced, Expect: expectBounded, PGTerminates: 3, BrokerDrops: 2},
			{Name: "redis-noaof-fenced", Store: storeRedis, Mode: modeFenced, Expect: expectExactlyOnce, RedisRestarts: 2, BrokerDrops: 2},
			{Name: "redis-always-unfenced", Store: storeRedis, RedisFsync: "always", Mode: modeUnfenced, Expect: expectBounded, RedisRestarts: 2, BrokerDrops: 2},
			{Name: "redis-noaof-unfenced", Store: storeRedis, Mode: modeUnfenced, Expect: expectBounded, RedisRestarts: 1},
			{Name: "redis-everysec-unfenced", Store: storeRedis, RedisFsync: "everysec", Mode: modeUnfenced, Expect: expectBounded, RedisRestarts: 2},
			{Name: "memstore-fenced", Store: storeMem, Mode: modeFenced, Expect: expectExactlyOnce, Consumers: 1, BrokerDrops: 2},
		}
	default:
		return nil, fmt.Errorf("unknown profile %q: short or full", name)
	}
	var cfgs []runConfig
	for _, b := range brokerNames {
		if _, ok := brokers[b]; !ok {
			return nil, fmt.Errorf("broker %q is not built into the harness (have %s)", b, strings.Join(slices.Sorted(maps.Keys(brokers)), ", "))
		}
		for _, s := range stores {
			c := base
			c.Name, c.Profile = b+"/"+s.Name, name
			c.Broker, c.Store, c.RedisFsync, c.Mode, c.Expect = b, s.Store, s.RedisFsync, s.Mode, s.Expect
			c.RedisRestarts, c.PGTerminates, c.BrokerDrops = s.RedisRestarts, s.PGTerminates, s.BrokerDrops
			c.Consumers = cmp.Or(s.Consumers, base.Consumers)
			if b != "kafka" {
				// The shared NATS and RabbitMQ servers are not crashed:
				// only Kafka's cluster is the harness's own.
				c.BrokerKills = 0
			}
			cfgs = append(cfgs, c)
		}
	}
	return cfgs, nil
}
