package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/cli/clitest"
	"github.com/idemgo/idem/storage"
)

// atPrompt is a stdin that runs hook when purge reads the operator's
// answer, as a worker that takes a record over while the prompt is open.
type atPrompt struct {
	hook func()
	r    io.Reader
}

func (a *atPrompt) Read(p []byte) (int, error) {
	if a.hook != nil {
		a.hook()
		a.hook = nil
	}
	return a.r.Read(p)
}

// TestPurgeKeepsARecordTakenOverAtThePrompt: on every store an operator
// reaches from a shell, a stalled record that a worker takes over while
// purge asks is not deleted under its new holder, by purge KEY or by purge
// --status in-progress, and purge says it kept it; the records that did
// not change are deleted, after a warning for one under a live lease, as
// purge KEY gives.
func TestPurgeKeepsARecordTakenOverAtThePrompt(t *testing.T) {
	for _, kind := range []string{"redis", "postgres", "dynamodb", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			raw, s := kindStore(t, kind)
			ctx := context.Background()
			ns := "takeover-" + strings.ReplaceAll(t.Name(), "/", "-")
			args := func(k string, lease time.Duration) storage.ClaimArgs {
				return storage.ClaimArgs{Key: storage.StoreKey(ns, k), Lease: lease, Retention: time.Hour}
			}
			for _, k := range []string{"single", "taken", "left"} {
				if _, err := s.Claim(ctx, args(k, time.Millisecond)); err != nil {
					t.Fatal(err)
				}
			}
			// takeOver claims k until its stalled lease is taken over (a
			// store that allows for clock skew waits a little longer).
			takeOver := func(k string) storage.Token {
				deadline := time.Now().Add(10 * time.Second)
				for {
					c, err := s.Claim(ctx, args(k, time.Hour))
					if err != nil {
						t.Fatal(err)
					}
					if c.Outcome == storage.Acquired {
						return c.Token
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: still %v after 10s", k, c.Outcome)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			holds := func(k string, tok storage.Token) {
				t.Helper()
				if r, err := s.Get(ctx, storage.StoreKey(ns, k)); err != nil || r.Token != tok {
					t.Fatalf("the record of %s after the purge: %+v %v, want the new holder's (token %d)", k, r, err, tok)
				}
			}

			var single storage.Token
			stdin = &atPrompt{hook: func() { single = takeOver("single") }, r: strings.NewReader("y\n")}
			code, stdout, stderr := clitest.Args(t, run, "purge", "--store", raw, "--namespace", ns, "single")
			holds("single", single)
			if code != 1 || !strings.Contains(stderr, "changed since it was shown") {
				t.Fatalf("purge of a record taken over at the prompt: %d\n%s%s", code, stdout, stderr)
			}

			var taken storage.Token
			stdin = &atPrompt{hook: func() { taken = takeOver("taken") }, r: strings.NewReader("y\n")}
			code, stdout, stderr = clitest.Args(t, run, "purge", "--store", raw, "--namespace", ns, "--status", "in-progress")
			holds("taken", taken)
			for _, k := range []string{"left", "single"} { // single under a live lease, of which purge warned
				if _, err := s.Get(ctx, storage.StoreKey(ns, k)); !errors.Is(err, storage.ErrNotFound) {
					t.Fatalf("the record of %s, unchanged since the purge counted it: %v", k, err)
				}
			}
			if code != 0 || !strings.Contains(stdout, "deleted 2 in-progress records") ||
				!strings.Contains(stdout, `kept "taken"`) || !strings.Contains(stdout, "1 of them is being run right now, under a live lease") {
				t.Fatalf("purge --status in-progress with a record taken over at the prompt: %d\n%s%s", code, stdout, stderr)
			}
		})
	}
	stdin = nil
}
