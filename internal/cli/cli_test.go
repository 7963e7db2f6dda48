package cli_test

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/cli"
)

func TestParseFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		help    bool   // flag.ErrHelp
		usage   string // in the *UsageError's message; "" for none
		printed bool
	}{
		{args: []string{"-n", "3"}},
		{args: []string{"-h"}, help: true},
		{args: []string{"-bogus"}, usage: "flag provided but not defined: -bogus", printed: true},
		{args: []string{"-n", "3", "now"}, usage: `prog: verb: unexpected argument "now" (flags only)`},
	} {
		fs := flag.NewFlagSet("verb", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Int("n", 1, "a number")
		err := cli.ParseFlags("prog", fs, c.args)
		ue, isUsage := errors.AsType[*cli.UsageError](err)
		switch {
		case c.help:
			if !errors.Is(err, flag.ErrHelp) {
				t.Errorf("%q: %v, want flag.ErrHelp", c.args, err)
			}
		case c.usage == "":
			if err != nil {
				t.Errorf("%q: %v, want nil", c.args, err)
			}
		case !isUsage || !strings.Contains(err.Error(), c.usage) || ue.Printed != c.printed:
			t.Errorf("%q: %#v, want a *UsageError with %q, printed %v", c.args, err, c.usage, c.printed)
		}
	}
}

func TestUsagef(t *testing.T) {
	inner := errors.New("inner")
	err := cli.Usagef("prog: --x: %w", inner)
	if ue, ok := errors.AsType[*cli.UsageError](err); !ok || ue.Printed || err.Error() != "prog: --x: inner" || !errors.Is(err, inner) {
		t.Errorf("Usagef: %#v, want an unprinted *UsageError wrapping inner", err)
	}
}
