package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/internal/cli/clitest"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl/storeurltest"
)

// TestInspectAndPurge: on every store an operator can reach from a shell,
// inspect shows a completed HTTP response, a failure and a live lease as
// the Guard left them, and purge deletes a record (asking first unless
// --yes) so that the key runs again.
func TestInspectAndPurge(t *testing.T) {
	for _, kind := range []string{"redis", "postgres", "dynamodb", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			raw, s := kindStore(t, kind)
			ctx := context.Background()
			g, err := idem.New(s, idem.Config{Namespace: "shop", Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			resp := idemhttp.EncodeResponse(&idemhttp.Response{Status: http.StatusCreated, Header: http.Header{}, Body: []byte(`{"id":7}`)})
			if _, err := g.DoScoped(ctx, "acme", "order-7", []byte("p"), func(context.Context) ([]byte, error) { return resp, nil }); err != nil {
				t.Fatal(err)
			}
			g.DoScoped(ctx, "acme", "order-8", []byte("p"), func(context.Context) ([]byte, error) {
				return nil, idem.Permanent(errors.New("card declined"))
			})
			if _, err := s.Claim(ctx, storage.ClaimArgs{Key: storage.ScopedStoreKey("shop", "acme", "order-9"), Fingerprint: []byte("fp"), Lease: time.Hour, Retention: time.Hour}); err != nil {
				t.Fatal(err)
			}
			at := []string{"--store", raw, "--namespace", "shop", "--scope", "acme"}

			code, stdout, stderr := clitest.Args(t, run, append(append([]string{"inspect"}, at...), "order-7")...)
			if code != 0 || !strings.Contains(stdout, "status       Completed") || !strings.Contains(stdout, "http status  201") ||
				!strings.Contains(stdout, "attempt      1") {
				t.Fatalf("inspect order-7: %d\n%s%s", code, stdout, stderr)
			}
			code, stdout, stderr = clitest.Args(t, run, append([]string{"inspect", "order-8", "--json"}, at...)...)
			var v recordView
			if code != 0 || json.Unmarshal([]byte(stdout), &v) != nil || v.Status != "Failed" || !strings.Contains(v.Failure, "card declined") {
				t.Fatalf("inspect --json order-8: %d %+v\n%s%s", code, v, stdout, stderr)
			}
			code, stdout, _ = clitest.Args(t, run, append(append([]string{"inspect"}, at...), "order-9")...)
			if code != 0 || !strings.Contains(stdout, "lease        live until") {
				t.Fatalf("inspect of a key in progress: %d\n%s", code, stdout)
			}
			if code, _, stderr = clitest.Args(t, run, append(append([]string{"inspect"}, at...), "order-404")...); code != 1 || !strings.Contains(stderr, "no record") {
				t.Fatalf("inspect of a key without a record: %d %s", code, stderr)
			}

			stdin = strings.NewReader("n\n")
			if code, stdout, stderr = clitest.Args(t, run, append(append([]string{"purge"}, at...), "order-8")...); code != 1 || !strings.Contains(stdout, "Delete this record? [y/N]") {
				t.Fatalf("purge answered no: %d\n%s%s", code, stdout, stderr)
			}
			if _, err := s.Get(ctx, storage.ScopedStoreKey("shop", "acme", "order-8")); err != nil {
				t.Fatalf("a purge answered no deleted the record: %v", err)
			}
			stdin = strings.NewReader("y\n")
			if code, stdout, stderr = clitest.Args(t, run, append(append([]string{"purge"}, at...), "order-8")...); code != 0 || !strings.Contains(stdout, "deleted the record") {
				t.Fatalf("purge answered yes: %d\n%s%s", code, stdout, stderr)
			}
			if code, stdout, stderr = clitest.Args(t, run, append(append([]string{"purge", "--yes"}, at...), "order-7")...); code != 0 {
				t.Fatalf("purge --yes: %d\n%s%s", code, stdout, stderr)
			}
			ran := 0
			for _, k := range []string{"order-7", "order-8"} {
				if _, err := g.DoScoped(ctx, "acme", k, []byte("p"), func(context.Context) ([]byte, error) { ran++; return nil, nil }); err != nil {
					t.Fatal(err)
				}
			}
			if ran != 2 {
				t.Fatalf("after their purge, %d of 2 keys ran again", ran)
			}
		})
	}
	stdin = nil
	if code, _, stderr := clitest.Args(t, run, "inspect", "--store", "mem://", "k"); code != 2 || !strings.Contains(stderr, "memstore lives in the process") {
		t.Fatalf("inspect mem://: %d %s", code, stderr)
	}
	if code, _, stderr := clitest.Args(t, run, "inspect", "--store", "mem://"); code != 2 || !strings.Contains(stderr, "no key") {
		t.Fatalf("inspect without a key: %d %s", code, stderr)
	}
}

// dynamoOr returns a --store URL of kind's of the test's own.
func dynamoOr(t *testing.T, kind string) string {
	if kind == "dynamodb" {
		return dynamoURL(t)
	}
	return storeurltest.URL(t, kind)
}

// kindStore returns a --store URL of kind's of the test's own, and the
// store opened from it (its table created), closed when the test ends.
func kindStore(t *testing.T, kind string) (string, storage.Store) {
	t.Helper()
	raw := dynamoOr(t, kind)
	s, closeStore, err := openStore(context.Background(), raw, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeStore() })
	return raw, s
}

// TestFailurePrintedEscaped: a stored failure's text is the handler's
// error, which may repeat what a publisher sent: inspect and purge print
// it quoted, so that no terminal escape reaches the operator's terminal
// and no newline forges a line of the record.
func TestFailurePrintedEscaped(t *testing.T) {
	cause := idem.Permanent(errors.New("declined\x1b[2J\x1b]0;owned\x07\r\nstatus       Completed\u009b31m"))
	r := storage.Record{Status: storage.StatusFailed, Attempt: 1, Result: storage.EncodeFailure(cause), ExpiresAt: time.Now().Add(time.Hour)}
	var b strings.Builder
	view(r, "k", "", "", time.Now()).print(&b)
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07\r\u009b") || strings.Count(out, "\nstatus ") != 1 {
		t.Fatalf("the failure printed raw:\n%s", out)
	}
	if !strings.Contains(out, `failure      "declined\x1b[2J`) {
		t.Fatalf("the failure is not printed quoted:\n%s", out)
	}
}
