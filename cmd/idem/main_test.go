package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/cli/clitest"
)

// TestMain fails the run if a goroutine of idem or of this command outlives
// the tests: consumers, the Guards' heartbeats, memstore's sweeper, the
// progress bar.
func TestMain(m *testing.M) { idemtest.Main(m, "github.com/idemgo/idem") }

func TestCommandLineUsage(t *testing.T) {
	clitest.Check(t, "idem", run, []clitest.Case{
		{Args: nil, Code: 2, Stderr: "idem <command> [flags]"},
		{Args: []string{"help"}, Code: 0, Stdout: "reap      delete pgstore's expired records"},
		{Args: []string{"-h"}, Code: 0, Stdout: "Commands:"},
		{Args: []string{"refund"}, Code: 2, Stderr: `idem: unknown command "refund"`},
		{Args: []string{"demo", "-h"}, Code: 0, Stderr: "Usage: idem demo [flags]"},
		{Args: []string{"help", "demo"}, Code: 0, Stderr: "\n  --crash-rate float"},
		{Args: []string{"migrate", "-h"}, Code: 0, Stderr: "idem migrate --store dynamodb://"},
		{Args: []string{"demo", "--messages", "0"}, Code: 2, Stderr: "idem: --messages 0: must be at least 1"},
		{Args: []string{"demo", "--consumers", "-3"}, Code: 2, Stderr: "idem: --consumers -3: must be at least 1"},
		{Args: []string{"demo", "--dup-rate", "1"}, Code: 2, Stderr: "idem: --dup-rate 1: must be at least 0 and below 1"},
		{Args: []string{"demo", "--dup-rate", "-0.1"}, Code: 2, Stderr: "idem: --dup-rate -0.1: must be at least 0 and below 1"},
		{Args: []string{"demo", "--crash-rate", "1.5"}, Code: 2, Stderr: "idem: --crash-rate 1.5: must be at least 0 and below 1"},
		{Args: []string{"demo", "--crash-rate", "NaN"}, Code: 2, Stderr: "idem: --crash-rate NaN: must be at least 0 and below 1"},
		{Args: []string{"demo", "--timeout", "0s"}, Code: 2, Stderr: "idem: --timeout 0s: must be positive"},
		{Args: []string{"demo", "--messages", "many"}, Code: 2, Stderr: `invalid value "many" for flag -messages`},
		{Args: []string{"demo", "--bogus"}, Code: 2, Stderr: "flag provided but not defined: -bogus"},
		{Args: []string{"demo", "now"}, Code: 2, Stderr: `idem: demo: unexpected argument "now"`},
		{Args: []string{"demo", "--store", "mysql://127.0.0.1:3306"}, Code: 2, Stderr: `idem: --store mysql://127.0.0.1:3306: unsupported scheme "mysql"`},
		{Args: []string{"demo", "--store", "sqlite://x.db?synchronous=off"}, Code: 2, Stderr: "idem: --store sqlite://x.db?synchronous=off: synchronous=\"off\": want full or normal"},
		{Args: []string{"demo", "--store", "redis://127.0.0.1:6379/0?bogus=1"}, Code: 2, Stderr: `idem: --store redis://127.0.0.1:6379/0?bogus=1: redis: unexpected option: bogus`},
		{Args: []string{"demo", "--store", "redis://127.0.0.1:6379/0?prefix={x}"}, Code: 2, Stderr: `Config.Prefix "{x}": must not contain`},
		{Args: []string{"demo", "--store", "postgres://u:secret@127.0.0.1/test?table=Orders"}, Code: 2, Stderr: `idem: --store postgres://u:xxxxx@127.0.0.1/test?table=Orders: pgstore: Config.Table`},
		{Args: []string{"migrate"}, Code: 2, Stderr: "idem: migrate: --store is required"},
		{Args: []string{"migrate", "--store", "redis://127.0.0.1:6379"}, Code: 2, Stderr: "want a postgres:// or dynamodb:// URL"},
		{Args: []string{"reap", "--store", "mem://"}, Code: 2, Stderr: "want a postgres:// URL"},
		{Args: []string{"reap", "--store", "postgres://127.0.0.1/test", "--batch", "0"}, Code: 2, Stderr: "idem: reap: --batch 0: must be at least 1"},
		{Args: []string{"demo", "--store", "127.0.0.1:6379"}, Code: 2, Stderr: `idem: --store`},
		{Args: []string{"demo", "--store", "mem://elsewhere"}, Code: 2, Stderr: "mem:// takes no host, path or options"},
	})
}

func TestCommandLineExitStatus(t *testing.T) {
	code, stdout, stderr := clitest.Args(t, run, "demo", "--messages", "300", "--seed", "5")
	if code != 0 || !strings.Contains(stdout, "seed 5 (repeat this run with --seed 5)") || !strings.Contains(stdout, "OK: ") {
		t.Errorf("a good run: exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	// A run that times out leaves orders unacked: they count as lost, and
	// the idem consumer losing one is a failure.
	code, stdout, stderr = clitest.Args(t, run, "demo", "--messages", "3000", "--crash-rate", "0.2", "--seed", "5", "--timeout", "1ms")
	if code != 1 || !strings.Contains(stderr, "idem: demo failed: the idem consumer made 0 double charges and lost") ||
		!strings.Contains(stderr, "timed out after 1ms") {
		t.Errorf("a run out of time: exit status %d, want 1 with the reason\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func TestVersion(t *testing.T) {
	code, out, stderr := clitest.Args(t, run, "version")
	if code != exitOK {
		t.Fatalf("idem version: exit %d, stderr %q", code, stderr)
	}
	if !strings.HasPrefix(out, "idem ") || !strings.Contains(out, runtime.Version()) || !strings.Contains(out, "github.com/idemgo/idem ") {
		t.Fatalf("idem version printed %q: want the tool's version, the Go version and the core module's version", out)
	}
	if code, _, _ := clitest.Args(t, run, "version", "extra"); code != exitUsage {
		t.Fatalf("idem version extra: exit %d, want %d", code, exitUsage)
	}
}
