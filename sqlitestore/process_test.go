package sqlitestore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/sqlitestore"
	"github.com/idemgo/idem/storage"
)

// The child processes of this file are the test binary run again, told
// what to do by these variables.
const (
	childEnv  = "IDEM_SQLITESTORE_CHILD" // "restart" or "share"
	pathEnv   = "IDEM_SQLITESTORE_PATH"  // the database file
	keysEnv   = "IDEM_SQLITESTORE_KEYS"  // how many keys
	offsetEnv = "IDEM_SQLITESTORE_OFFSET"
)

// childNamespace is the namespace of the children's Guards.
const childNamespace = "processes"

// runChild is a child process: it runs Guard.Do over keys k0, k1, … on
// the file, starting at the offset and wrapping around. A "restart" child
// prints "stored k v" once Do returned, the outcome stored, and never
// ends by itself (the test kills it); a "share" child prints "ran k" when
// fn runs, and "done" at the end.
func runChild() int {
	mode, path := os.Getenv(childEnv), os.Getenv(pathEnv)
	n, _ := strconv.Atoi(os.Getenv(keysEnv))
	offset, _ := strconv.Atoi(os.Getenv(offsetEnv))
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Config{BusyTimeout: 30 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	lease := 30 * time.Second // no takeover among live processes
	if mode == "restart" {
		lease = 2 * time.Second // the keys in progress at the kill are taken over after it
	}
	g, err := idem.New(s, idem.Config{Namespace: childNamespace, Lease: lease, Wait: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer g.Close()
	for i := range n {
		k := "k" + strconv.Itoa((i+offset)%n)
		value := fmt.Sprintf("%s by %d", k, os.Getpid())
		res, err := g.Do(ctx, k, nil, func(context.Context) ([]byte, error) {
			if mode == "share" {
				fmt.Printf("ran %s\n", k)
			}
			return []byte(value), nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if mode == "restart" {
			fmt.Printf("stored %s %s\n", k, res.Value)
		}
	}
	if mode == "restart" {
		select {} // until killed
	}
	fmt.Println("done")
	return 0
}

// child is a running child process and the lines it prints.
type child struct {
	cmd    *exec.Cmd
	lines  <-chan string
	stderr *bytes.Buffer
}

func startChild(t *testing.T, mode, path string, keys, offset int) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, pathEnv+"="+path, keysEnv+"="+strconv.Itoa(keys), offsetEnv+"="+strconv.Itoa(offset))
	ch := &child{cmd: cmd}
	ch.lines, ch.stderr = testenv.StartLines(t, cmd, 1024)
	return ch
}

// A process SIGKILLed while it runs Guard.Do over many keys on a file
// (synchronous FULL) loses none of the outcomes it saw stored, and no key
// whose outcome was stored runs again once the file is reopened.
func TestRestartAfterSIGKILL(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	const keys, killAt = 100000, 300
	ch := startChild(t, "restart", path, keys, 0)
	reported := map[string]string{}
	deadline := time.After(2 * time.Minute)
	killed := false
	for !killed {
		select {
		case line, ok := <-ch.lines:
			if !ok {
				t.Fatalf("the child ended before the kill: %s", ch.stderr)
			}
			k, v, _ := strings.Cut(strings.TrimPrefix(line, "stored "), " ")
			reported[k] = v
			if len(reported) == killAt {
				if err := ch.cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed = true
			}
		case <-deadline:
			t.Fatalf("the child reported %d outcomes in 2 minutes, want %d: %s", len(reported), killAt, ch.stderr)
		}
	}
	for line := range ch.lines { // what it printed before it died
		k, v, _ := strings.Cut(strings.TrimPrefix(line, "stored "), " ")
		reported[k] = v
	}
	if err := ch.cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the child's end: %v, want killed", err)
	}

	s := openStore(t, path, sqlitestore.Config{})
	ctx := testCtx(t)
	last := 0
	for k, v := range reported {
		r, err := s.Get(ctx, storage.StoreKey(childNamespace, k))
		if err != nil || r.Status != storage.StatusCompleted || string(r.Result) != v {
			t.Fatalf("%s, reported stored as %q: after the restart %v %q, %v", k, v, r.Status, r.Result, err)
		}
		i, _ := strconv.Atoi(strings.TrimPrefix(k, "k"))
		last = max(last, i)
	}
	// Every key the child may have touched, and a few beyond: a stored
	// outcome replays, fn never runs for it; a key the kill left in
	// progress is taken over once its lease (2s) ended.
	g, err := idem.New(s, idem.Config{Namespace: childNamespace, Wait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	stored, ran := 0, 0
	for i := range last + 10 {
		k := "k" + strconv.Itoa(i)
		before, err := s.Get(ctx, storage.StoreKey(childNamespace, k))
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			t.Fatal(err)
		}
		done := err == nil && before.Status == storage.StatusCompleted
		runs := 0
		res, err := g.Do(ctx, k, nil, func(context.Context) ([]byte, error) { runs++; return []byte("after the restart"), nil })
		switch {
		case err != nil:
			t.Fatalf("%s after the restart: %v", k, err)
		case done && (runs != 0 || !res.Replayed || string(res.Value) != string(before.Result)):
			t.Fatalf("%s, stored as %q before the restart: ran %d times after it, got %q", k, before.Result, runs, res.Value)
		case reported[k] != "" && string(res.Value) != reported[k]:
			t.Fatalf("%s, reported stored as %q: %q after the restart", k, reported[k], res.Value)
		}
		if done {
			stored++
		}
		ran += runs
	}
	t.Logf("killed after %d reported outcomes; %d stored in the file, %d keys run after the restart", len(reported), stored, ran)
}

// Several processes on one local file: of three processes running
// Guard.Do over the same keys at once, exactly one runs each key.
func TestSeveralProcessesOnOneFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	openStore(t, path, sqlitestore.Config{}) // created before the children race to
	const keys, procs = 200, 3
	children := make([]*child, procs)
	for i := range children {
		children[i] = startChild(t, "share", path, keys, i*keys/procs)
	}
	runs := map[string]int{}
	for i, ch := range children {
		done := false
		for line := range ch.lines {
			if k, ok := strings.CutPrefix(line, "ran "); ok {
				runs[k]++
			}
			done = done || line == "done"
		}
		if err := ch.cmd.Wait(); err != nil || !done {
			t.Fatalf("child %d: %v (done %v): %s", i, err, done, ch.stderr)
		}
	}
	for i := range keys {
		if k := "k" + strconv.Itoa(i); runs[k] != 1 {
			t.Errorf("%s ran %d times across %d processes, want 1", k, runs[k], procs)
		}
	}
}
