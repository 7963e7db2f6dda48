package idemtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// scanListsLiveRecords: a Scanner lists the live records of a prefix, each
// once and as Get reads it, none of another namespace, none expired, and
// stops when told to.
func scanListsLiveRecords(t *testing.T, e *env) {
	sc, ok := e.s.(storage.Scanner)
	if !ok {
		t.Skip("the store does not implement storage.Scanner")
	}
	c := e.mustClaim(e.args("in-progress", "fp"), storage.Acquired)
	done := e.mustClaim(e.args("done", "fp"), storage.Acquired)
	if err := e.s.Complete(ctx(t), e.key("done"), done.Token, []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	failed := e.mustClaim(e.args("failed", "fp"), storage.Acquired)
	if err := e.s.Fail(ctx(t), e.key("failed"), failed.Token, storage.EncodeFailure(idem.Permanent(errors.New("no"))), time.Minute); err != nil {
		t.Fatal(err)
	}
	e.mustClaim(e.args("deleted", "fp"), storage.Acquired)
	if err := e.s.Delete(ctx(t), e.key("deleted")); err != nil {
		t.Fatal(err)
	}
	other := newEnv(t, e.s)
	other.mustClaim(other.args("elsewhere", "fp"), storage.Acquired)

	want := map[string]storage.Status{e.key("in-progress"): storage.StatusInProgress, e.key("done"): storage.StatusCompleted, e.key("failed"): storage.StatusFailed}
	seen := map[string]int{}
	err := sc.Scan(ctx(t), storage.NamespacePrefix(e.ns), func(r storage.Record) bool {
		seen[r.Key]++
		if st, ok := want[r.Key]; !ok {
			t.Errorf("Scan of the namespace's prefix listed %q", r.Key)
		} else if r.Status != st {
			t.Errorf("Scan listed %q as %v, want %v", r.Key, r.Status, st)
		}
		if r.Key == e.key("done") && string(r.Result) != "v" {
			t.Errorf("Scan listed %q with result %q, want %q", r.Key, r.Result, "v")
		}
		if r.Key == e.key("in-progress") && r.Token != c.Token {
			t.Errorf("Scan listed the record in progress with token %d, want the holder's %d", r.Token, c.Token)
		}
		return true
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("Scan listed %q %d times, want once", k, seen[k])
		}
	}
	n := 0
	if err := sc.Scan(ctx(t), storage.NamespacePrefix(e.ns), func(storage.Record) bool { n++; return false }); err != nil || n != 1 {
		t.Errorf("Scan whose fn returns false at once: fn called %d times, %v; want once, nil", n, err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sc.Scan(cctx, storage.NamespacePrefix(e.ns), func(storage.Record) bool { return true }); !errors.Is(err, context.Canceled) {
		t.Errorf("Scan with a cancelled context: %v, want context.Canceled", err)
	}
}
