// Package cli is what idem's commands share of their command lines: the
// error of a bad command line, on which a command exits with status 2, and
// the parsing of flags that returns it.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// UsageError is a bad command line: the exit status is 2.
type UsageError struct {
	Err     error
	Printed bool // the flag package printed it already, with the flags
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a [*UsageError] of the message format and args make, as
// fmt.Errorf does.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Parse parses args with fs, which must be set to ContinueOnError. It
// returns flag.ErrHelp for -h, and a [*UsageError], printed, for a bad
// flag. Arguments after the flags are left in fs.Args.
func Parse(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return &UsageError{Err: err, Printed: true}
	}
	return err
}

// ParseFlags is [Parse] for a command that takes flags only: an argument
// left over is a [*UsageError] too, whose message starts with prog (the
// program's name) and fs's name.
func ParseFlags(prog string, fs *flag.FlagSet, args []string) error {
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("%s: %s: unexpected argument %q (flags only)", prog, fs.Name(), strings.Join(fs.Args(), " "))
	}
	return nil
}
