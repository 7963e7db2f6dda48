package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/idemgo/idem/idemtest"
)

// TestMain fails the run if a goroutine of idem or of this command outlives
// the tests: consumers, the Guards' heartbeats, memstore's sweeper, the
// progress bar.
func TestMain(m *testing.M) { idemtest.Main(m, "github.com/idemgo/idem") }

func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// usageCase is a command line and what it must answer.
type usageCase struct {
	args   []string
	code   int
	stdout string // a part of it, or "" for nothing at all
	stderr string // a part of it, or "" for nothing at all
}

// checkUsage runs each case as a subtest.
func checkUsage(t *testing.T, tests []usageCase) {
	for _, tt := range tests {
		name := strings.Join(tt.args, " ")
		if name == "" {
			name = "no arguments"
		}
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			for _, c := range []struct{ name, got, want string }{{"stdout", stdout, tt.stdout}, {"stderr", stderr, tt.stderr}} {
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

func TestCommandLineUsage(t *testing.T) {
	checkUsage(t, []usageCase{
		{args: nil, code: 2, stderr: "idem <command> [flags]"},
		{args: []string{"help"}, code: 0, stdout: "reap      delete pgstore's expired records"},
		{args: []string{"-h"}, code: 0, stdout: "Commands:"},
		{args: []string{"refund"}, code: 2, stderr: `idem: unknown command "refund"`},
		{args: []string{"demo", "-h"}, code: 0, stderr: "Usage: idem demo [flags]"},
		{args: []string{"help", "demo"}, code: 0, stderr: "\n  --crash-rate float"},
		{args: []string{"migrate", "-h"}, code: 0, stderr: "idem migrate --store dynamodb://"},
		{args: []string{"demo", "--messages", "0"}, code: 2, stderr: "idem: --messages 0: must be at least 1"},
		{args: []string{"demo", "--consumers", "-3"}, code: 2, stderr: "idem: --consumers -3: must be at least 1"},
		{args: []string{"demo", "--dup-rate", "1"}, code: 2, stderr: "idem: --dup-rate 1: must be at least 0 and below 1"},
		{args: []string{"demo", "--dup-rate", "-0.1"}, code: 2, stderr: "idem: --dup-rate -0.1: must be at least 0 and below 1"},
		{args: []string{"demo", "--crash-rate", "1.5"}, code: 2, stderr: "idem: --crash-rate 1.5: must be at least 0 and below 1"},
		{args: []string{"demo", "--crash-rate", "NaN"}, code: 2, stderr: "idem: --crash-rate NaN: must be at least 0 and below 1"},
		{args: []string{"demo", "--timeout", "0s"}, code: 2, stderr: "idem: --timeout 0s: must be positive"},
		{args: []string{"demo", "--messages", "many"}, code: 2, stderr: `invalid value "many" for flag -messages`},
		{args: []string{"demo", "--bogus"}, code: 2, stderr: "flag provided but not defined: -bogus"},
		{args: []string{"demo", "now"}, code: 2, stderr: `idem: demo: unexpected argument "now"`},
		{args: []string{"demo", "--store", "mysql://127.0.0.1:3306"}, code: 2, stderr: `idem: --store mysql://127.0.0.1:3306: unsupported scheme "mysql"`},
		{args: []string{"demo", "--store", "sqlite://x.db?synchronous=off"}, code: 2, stderr: "idem: --store sqlite://x.db?synchronous=off: synchronous=\"off\": want full or normal"},
		{args: []string{"demo", "--store", "redis://127.0.0.1:6379/0?bogus=1"}, code: 2, stderr: `idem: --store redis://127.0.0.1:6379/0?bogus=1: redis: unexpected option: bogus`},
		{args: []string{"demo", "--store", "redis://127.0.0.1:6379/0?prefix={x}"}, code: 2, stderr: `Config.Prefix "{x}": must not contain`},
		{args: []string{"demo", "--store", "postgres://u:secret@127.0.0.1/test?table=Orders"}, code: 2, stderr: `idem: --store postgres://u:xxxxx@127.0.0.1/test?table=Orders: pgstore: Config.Table`},
		{args: []string{"migrate"}, code: 2, stderr: "idem: migrate: --store is required"},
		{args: []string{"migrate", "--store", "redis://127.0.0.1:6379"}, code: 2, stderr: "want a postgres:// or dynamodb:// URL"},
		{args: []string{"reap", "--store", "mem://"}, code: 2, stderr: "want a postgres:// URL"},
		{args: []string{"reap", "--store", "postgres://127.0.0.1/test", "--batch", "0"}, code: 2, stderr: "idem: reap: --batch 0: must be at least 1"},
		{args: []string{"demo", "--store", "127.0.0.1:6379"}, code: 2, stderr: `idem: --store`},
		{args: []string{"demo", "--store", "mem://elsewhere"}, code: 2, stderr: "mem:// takes no host, path or options"},
	})
}

func TestCommandLineExitStatus(t *testing.T) {
	code, stdout, stderr := runArgs(t, "demo", "--messages", "300", "--seed", "5")
	if code != 0 || !strings.Contains(stdout, "seed 5 (repeat this run with --seed 5)") || !strings.Contains(stdout, "OK: ") {
		t.Errorf("a good run: exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	// A run that times out leaves orders unacked: they count as lost, and
	// the idem consumer losing one is a failure.
	code, stdout, stderr = runArgs(t, "demo", "--messages", "3000", "--crash-rate", "0.2", "--seed", "5", "--timeout", "1ms")
	if code != 1 || !strings.Contains(stderr, "idem: demo failed: the idem consumer made 0 double charges and lost") ||
		!strings.Contains(stderr, "timed out after 1ms") {
		t.Errorf("a run out of time: exit status %d, want 1 with the reason\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func TestVersion(t *testing.T) {
	code, out, stderr := runArgs(t, "version")
	if code != exitOK {
		t.Fatalf("idem version: exit %d, stderr %q", code, stderr)
	}
	if !strings.HasPrefix(out, "idem ") || !strings.Contains(out, runtime.Version()) || !strings.Contains(out, "github.com/idemgo/idem ") {
		t.Fatalf("idem version printed %q: want the tool's version, the Go version and the core module's version", out)
	}
	if code, _, _ := runArgs(t, "version", "extra"); code != exitUsage {
		t.Fatalf("idem version extra: exit %d, want %d", code, exitUsage)
	}
}
