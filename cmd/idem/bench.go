package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

func init() {
	register(command{
		name:    "bench",
		summary: "measure idem's cost: bench store beside its server's bare client, bench http behind idemhttp",
		run:     runBench,
	})
}

// benchmark is one sub-benchmark of idem bench, named by the word after
// bench, so each experiment keeps its own flags.
type benchmark struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// benchmarks are the sub-benchmarks of idem bench, in the order its help
// lists them.
var benchmarks = []benchmark{
	{name: "http", summary: "a handler that sleeps, driven by concurrent clients, bare and behind idemhttp over each store", run: runBenchHTTP},
	{name: "store", summary: "a store's operations beside a bare client of its server doing the least the same work needs", run: runBenchStore},
}

func benchNames() string {
	names := make([]string, len(benchmarks))
	for i, b := range benchmarks {
		names[i] = b.name
	}
	return strings.Join(names, ", ")
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// A flag set without flags still answers -h and refuses flags given
	// before the benchmark's name, the way every other verb does.
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: idem bench <benchmark> [flags]\n\nBenchmarks:\n\n")
		tw := tabwriter.NewWriter(fs.Output(), 0, 0, 3, ' ', 0)
		for _, b := range benchmarks {
			fmt.Fprintf(tw, "\t%s\t%s\n", b.name, b.summary)
		}
		tw.Flush()
		fmt.Fprint(fs.Output(), "\nRun 'idem bench <benchmark> -h' for a benchmark's flags.\n")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err: err, printed: true}
	}
	if fs.NArg() == 0 {
		return usageErrorf("idem: bench: name a benchmark: %s", benchNames())
	}
	name := fs.Arg(0)
	for _, b := range benchmarks {
		if b.name != name {
			continue
		}
		err := b.run(ctx, fs.Args()[1:], stdout, stderr)
		// main's hint names the verb only; the flags are the benchmark's.
		if ue, ok := errors.AsType[*usageError](err); ok && !ue.printed {
			fmt.Fprintln(stderr, ue.err)
			fmt.Fprintf(stderr, "run 'idem bench %s -h' for its flags\n", name)
			ue.printed = true
		}
		return err
	}
	return usageErrorf("idem: bench: unknown benchmark %q (benchmarks: %s)", name, benchNames())
}
