// Package clitest runs an idem command's run function the way its tests
// do: with arguments, capturing its exit status and what it prints, and
// checking a table of command lines against what each must answer.
package clitest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// Run is a command's entry point as its main calls it: the arguments after
// the program's name, where to print, and the exit status it returns.
type Run func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Args calls run with args and returns its exit status and what it printed.
func Args(t *testing.T, run Run, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Case is a command line and what it must answer.
type Case struct {
	Args   []string
	Code   int
	Stdout string // a part of it, or "" for nothing at all
	Stderr string // a part of it, or "" for nothing at all
}

// Check runs each case as a subtest named for the command line of prog.
func Check(t *testing.T, prog string, run Run, cases []Case) {
	t.Helper()
	for _, tt := range cases {
		t.Run(strings.Join(append([]string{prog}, tt.Args...), " "), func(t *testing.T) {
			code, stdout, stderr := Args(t, run, tt.Args...)
			if code != tt.Code {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.Code, stdout, stderr)
			}
			for _, c := range []struct{ name, got, want string }{{"stdout", stdout, tt.Stdout}, {"stderr", stderr, tt.Stderr}} {
				if c.want == "" && c.got != "" {
					t.Errorf("%s = %q, want nothing", c.name, c.got)
				}
				if !strings.Contains(c.got, c.want) {
					t.Errorf("%s = %q, want it to contain %q", c.name, c.got, c.want)
				}
			}
		})
	}
}
