package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/idemgo/idem/internal/cli"
)

// command is one verb of the tool. A verb lives in a file of its own that
// registers it from an init function.
type command struct {
	name    string
	summary string // one line for the list of commands
	// run runs the verb with the arguments after its name. It returns a
	// *cli.UsageError for bad flags or arguments, flag.ErrHelp after printing
	// its help, and any other error when the command failed.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands holds the verbs by name.
var commands = map[string]command{}

// register adds a verb; each verb's file calls it from init.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("idem: command " + c.name + " registered twice")
	}
	commands[c.name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// run runs the command line args (without the program name) and returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name, args := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) == 0 {
			usage(stdout)
			return exitOK
		}
		name, args = args[0], []string{"-h"} // idem help demo = idem demo -h
	}
	if secrets := secretsIn(args); len(secrets) > 0 {
		stdout, stderr = scrubber{stdout, secrets}, scrubber{stderr, secrets}
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "idem: unknown command %q\n\n", name)
		usage(stderr)
		return exitUsage
	}
	err := c.run(ctx, args, stdout, stderr)
	var ue *cli.UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		if !ue.Printed { // else the flag package printed it, with the flags
			fmt.Fprintln(stderr, ue.Err)
			fmt.Fprintf(stderr, "run 'idem %s -h' for its flags\n", name)
		}
		return exitUsage
	}
	fmt.Fprintln(stderr, err)
	return exitFailed
}

func usage(w io.Writer) {
	fmt.Fprint(w, "idem is the command-line tool of github.com/idemgo/idem.\n\nUsage:\n\n\tidem <command> [flags]\n\nCommands:\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(tw, "\t%s\t%s\n", name, commands[name].summary)
	}
	tw.Flush()
	fmt.Fprint(w, "\nRun 'idem <command> -h' for a command's flags.\n")
}

// printFlags prints fs's flags as fs.PrintDefaults does, but each as
// --name, the way the documentation writes them (the flag package takes
// -name and --name alike).
func printFlags(fs *flag.FlagSet) {
	var b strings.Builder
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	for line := range strings.Lines(b.String()) {
		if strings.HasPrefix(line, "  -") {
			line = "  --" + line[len("  -"):]
		}
		fmt.Fprint(out, line)
	}
}

// usageErrorf returns a bad command line's error (cli.Usagef).
func usageErrorf(format string, args ...any) error { return cli.Usagef(format, args...) }

// parseFlags parses a verb's flags, which are all it takes (cli.ParseFlags).
func parseFlags(fs *flag.FlagSet, args []string) error { return cli.ParseFlags("idem", fs, args) }
