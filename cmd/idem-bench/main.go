package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/internal/cli"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
	_ "github.com/idemgo/idem/storeurl/dynamourl"
	_ "github.com/idemgo/idem/storeurl/pgurl"
	_ "github.com/idemgo/idem/storeurl/redisurl"
	_ "github.com/idemgo/idem/storeurl/sqliteurl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// benchmark is one benchmark of idem-bench, named by its first argument,
// so each experiment keeps its own flags.
type benchmark struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// benchmarks are the benchmarks of idem-bench, in the order its help lists
// them.
var benchmarks = []benchmark{
	{name: "http", summary: "a handler that sleeps, driven by concurrent clients, bare and behind idemhttp over each store", run: runBenchHTTP},
	{name: "store", summary: "a store's operations beside a bare client of its server doing the least the same work needs", run: runBenchStore},
	{name: "chart", summary: "not a benchmark: renders BENCHMARKS.md's charts from docs/bench/results.json", run: runChart},
}

func benchNames() string {
	names := make([]string, len(benchmarks))
	for i, b := range benchmarks {
		names[i] = b.name
	}
	return strings.Join(names, ", ")
}

// run runs the command line args (without the program name) and returns
// the exit status: 0 on success, 1 when the benchmark failed, 2 on a
// usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "help" {
		args = append(args[1:], "-h") // idem-bench help store = idem-bench store -h
	}
	err := runBench(ctx, args, stdout, stderr)
	ue, isUsage := errors.AsType[*cli.UsageError](err)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case isUsage:
		if !ue.Printed {
			fmt.Fprintln(stderr, ue.Err)
		}
		return 2
	}
	fmt.Fprintln(stderr, err)
	return 1
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// A flag set without flags still answers -h and refuses flags given
	// before the benchmark's name.
	fs := flag.NewFlagSet("idem-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "idem-bench measures what idem costs (github.com/idemgo/idem).\n\nUsage: idem-bench <benchmark> [flags]\n\nBenchmarks:\n\n")
		tw := tabwriter.NewWriter(fs.Output(), 0, 0, 3, ' ', 0)
		for _, b := range benchmarks {
			fmt.Fprintf(tw, "\t%s\t%s\n", b.name, b.summary)
		}
		tw.Flush()
		fmt.Fprint(fs.Output(), "\nRun 'idem-bench <benchmark> -h' for a benchmark's flags.\n")
	}
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return usageErrorf("idem-bench: name a benchmark: %s", benchNames())
	}
	name := fs.Arg(0)
	for _, b := range benchmarks {
		if b.name != name {
			continue
		}
		err := b.run(ctx, fs.Args()[1:], stdout, stderr)
		if ue, ok := errors.AsType[*cli.UsageError](err); ok && !ue.Printed {
			fmt.Fprintln(stderr, ue.Err)
			fmt.Fprintf(stderr, "run 'idem-bench %s -h' for its flags\n", name)
			ue.Printed = true
		}
		return err
	}
	return usageErrorf("idem-bench: unknown benchmark %q (benchmarks: %s)", name, benchNames())
}

// usageErrorf returns a bad command line's error (cli.Usagef).
func usageErrorf(format string, args ...any) error { return cli.Usagef(format, args...) }

// parseFlags parses a benchmark's flags, which are all it takes
// (cli.ParseFlags).
func parseFlags(fs *flag.FlagSet, args []string) error { return cli.ParseFlags("idem-bench", fs, args) }

// storeUsage documents the store URLs, for the flags' help.
const storeUsage = `a store URL as storeurl.Open reads it (github.com/idemgo/idem/storeurl): mem://,
redis://host:port[/db] (rediss:// for TLS), postgres://user@host:port/db, dynamodb://host:port/table or
sqlite://file.db`

// openStore opens the store of rawURL with storeurl.Open, creating its
// table if it has one; a URL storeurl cannot use is a *cli.UsageError.
func openStore(ctx context.Context, rawURL string) (storage.Store, func() error, error) {
	s, closeStore, err := storeurl.Open(ctx, rawURL, storeurl.Migrate())
	if ue, ok := errors.AsType[*storeurl.URLError](err); ok {
		return nil, nil, usageErrorf("idem-bench: --store %s: %v", ue.URL, ue.Err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("idem-bench: %w", err)
	}
	return s, closeStore, nil
}

// go-redis logs every failed dial by itself, to stderr; the command reports
// the error the call returns instead, once, with the store's URL.
func init() { redis.SetLogger(discardRedisLog{}) }

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}
