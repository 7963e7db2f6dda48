package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

func init() {
	register(command{
		name:    "version",
		summary: "print the version of idem and of its modules in this build",
		run:     runVersion,
	})
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: idem version\n\nPrints the version of the idem tool and of the idem modules built into it.\n")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintf(stdout, "idem (unknown version) %s\n", runtime.Version())
		return nil
	}
	fmt.Fprintf(stdout, "idem %s %s %s/%s\n", moduleVersion(info.Main), info.GoVersion, runtime.GOOS, runtime.GOARCH)
	for _, m := range info.Deps {
		if strings.HasPrefix(m.Path, "github.com/idemgo/") {
			fmt.Fprintf(stdout, "  %s %s\n", m.Path, moduleVersion(*m))
		}
	}
	return nil
}

// moduleVersion is m's version, or "(devel)" for a build from a work tree;
// a module replaced by a folder says so.
func moduleVersion(m debug.Module) string {
	if m.Replace != nil && m.Replace.Version == "" {
		return m.Version + " (from " + m.Replace.Path + ")"
	}
	if m.Version == "" {
		return "(devel)"
	}
	return m.Version
}
