package cli_test

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/cli"
)

// parse parses args as the flags of a verb that takes -n.
func parse(args ...string) error {
	fs := flag.NewFlagSet("verb", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("n", 1, "a number")
	return cli.ParseFlags("prog", fs, args)
}

func TestParseFlags(t *testing.T) {
	if err := parse("-n", "3"); err != nil {
		t.Errorf("good flags: %v", err)
	}
	if err := parse("-h"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	// The flag package printed a bad flag, with the flags; the command
	// prints what is left over.
	err := parse("-bogus")
	if ue, ok := errors.AsType[*cli.UsageError](err); !ok || !ue.Printed || !strings.Contains(err.Error(), "-bogus") {
		t.Errorf("-bogus: %#v, want a printed *UsageError", err)
	}
	err = parse("-n", "3", "now")
	if ue, ok := errors.AsType[*cli.UsageError](err); !ok || ue.Printed || err.Error() != `prog: verb: unexpected argument "now" (flags only)` {
		t.Errorf("an argument left over: %#v, want an unprinted *UsageError naming prog, verb and the argument", err)
	}
}

func TestUsagef(t *testing.T) {
	inner := errors.New("inner")
	err := cli.Usagef("prog: --x: %w", inner)
	if ue, ok := errors.AsType[*cli.UsageError](err); !ok || ue.Printed || err.Error() != "prog: --x: inner" || !errors.Is(err, inner) {
		t.Errorf("Usagef: %#v, want an unprinted *UsageError wrapping inner", err)
	}
}
