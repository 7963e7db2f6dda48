package main

import (
	"strings"
	"testing"

	"github.com/idemgo/idem/dynamostore/dynamostoretest"
	"github.com/idemgo/idem/internal/cli/clitest"
)

// dynamoURL returns a dynamodb:// --store URL naming a table of the
// test's own, deleted when the test ends (dynamostoretest.URL).
func dynamoURL(t *testing.T) string { return dynamostoretest.URL(t) }

// TestDynamoDB: --store dynamodb://… is all migrate and the demo need; the
// table is created on the way, and an unreachable server is exit status 1
// with ErrStoreUnavailable's message.
func TestDynamoDB(t *testing.T) {
	raw := dynamoURL(t)
	for range 2 {
		code, stdout, stderr := clitest.Args(t, run, "migrate", "--store", raw)
		if code != 0 || !strings.Contains(stdout, "is up to date") {
			t.Fatalf("migrate --store %s: exit status %d\nstdout:\n%s\nstderr:\n%s", raw, code, stdout, stderr)
		}
	}
	code, stdout, stderr := clitest.Args(t, run, "demo", "--messages", "200", "--dup-rate", "0.3", "--crash-rate", "0.05", "--seed", "7", "--store", dynamoURL(t))
	if code != 0 || !strings.Contains(stdout, "OK: idem charged every order once in this run") {
		t.Fatalf("demo: exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, _, stderr = clitest.Args(t, run, "demo", "--store", "dynamodb://127.0.0.1:1/idem_records")
	if code != 1 || !strings.Contains(stderr, "idem: store unavailable") {
		t.Fatalf("demo on no server: exit status %d, stderr %q; want 1 and ErrStoreUnavailable", code, stderr)
	}
	code, _, stderr = clitest.Args(t, run, "demo", "--store", "dynamodb://127.0.0.1:8000/a?b=c")
	if code != 2 || !strings.HasPrefix(stderr, "idem: --store") {
		t.Fatalf("demo with a bad dynamodb URL: exit status %d, stderr %q; want 2", code, stderr)
	}
}
