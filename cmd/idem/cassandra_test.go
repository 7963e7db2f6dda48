package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/cassandrastore/cassandrastoretest"
	"github.com/idemgo/idem/internal/cli/clitest"
	"github.com/idemgo/idem/storage"
)

// TestCassandra: --store cassandra://… is all migrate, the demo and the
// operator's verbs need; the table is made on the way, and an unreachable
// node is exit status 1 with ErrStoreUnavailable's message.
func TestCassandra(t *testing.T) {
	raw := cassandrastoretest.URL(t)
	for range 2 {
		code, stdout, stderr := clitest.Args(t, run, "migrate", "--store", raw)
		if code != 0 || !strings.Contains(stdout, "is up to date") {
			t.Fatalf("migrate --store %s: exit status %d\nstdout:\n%s\nstderr:\n%s", raw, code, stdout, stderr)
		}
	}
	code, stdout, stderr := clitest.Args(t, run, "demo", "--messages", "100", "--dup-rate", "0.3", "--crash-rate", "0.05", "--seed", "7", "--store", raw)
	if code != 0 || !strings.Contains(stdout, "OK: idem charged every order once in this run") {
		t.Fatalf("demo: exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, closeStore, err := openStore(ctx, raw, false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	key := storage.StoreKey("cli-cassandra", "order-1")
	c, err := s.Claim(ctx, storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Minute})
	if err != nil || s.Complete(ctx, key, c.Token, []byte("charged"), time.Minute) != nil {
		t.Fatalf("claim and complete: %+v, %v", c, err)
	}
	for _, args := range [][]string{
		{"inspect", "--store", raw, "--namespace", "cli-cassandra", "order-1"},
		{"stats", "--store", raw, "--namespace", "cli-cassandra"},
	} {
		if code, stdout, stderr := clitest.Args(t, run, args...); code != 0 || !strings.Contains(strings.ToLower(stdout), "completed") {
			t.Fatalf("%s: exit status %d\nstdout:\n%s\nstderr:\n%s", args[0], code, stdout, stderr)
		}
	}

	code, _, stderr = clitest.Args(t, run, "demo", "--store", "cassandra://127.0.0.1:1/idem")
	if code != 1 || !strings.Contains(stderr, "idem: store unavailable") {
		t.Fatalf("demo on no node: exit status %d, stderr %q; want 1 and ErrStoreUnavailable", code, stderr)
	}
	code, _, stderr = clitest.Args(t, run, "demo", "--store", "cassandra://127.0.0.1:9042/idem?b=c")
	if code != 2 || !strings.HasPrefix(stderr, "idem: --store") {
		t.Fatalf("demo with a bad cassandra URL: exit status %d, stderr %q; want 2", code, stderr)
	}
}
