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

func TestExit(t *testing.T) {
	for _, c := range []struct {
		err     error
		code    int
		printed string
	}{
		{nil, 0, ""},
		{flag.ErrHelp, 0, ""},
		{parse("-bogus"), 2, ""}, // the flag package printed it
		{cli.Usagef("prog: --x: bad"), 2, "prog: --x: bad\n"},
		{errors.New("prog: failed"), 1, "prog: failed\n"},
	} {
		var stderr strings.Builder
		if code := cli.Exit(c.err, &stderr); code != c.code || stderr.String() != c.printed {
			t.Errorf("Exit(%v) = %d, printing %q; want %d, printing %q", c.err, code, stderr.String(), c.code, c.printed)
		}
	}
}
