package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/idem/dynamostore"
)

// dynamoURL returns a dynamodb:// --store URL of the server at
// IDEM_DYNAMODB_URL (default http://127.0.0.1:8000) naming a table of the
// test's own, which is deleted when the test ends. A server that does not
// answer skips the test, or fails it under IDEM_REQUIRE_SERVICES=1.
func dynamoURL(t *testing.T) string {
	t.Helper()
	endpoint := envOr("IDEM_DYNAMODB_URL", "http://127.0.0.1:8000")
	raw := strings.Replace(endpoint, "http://", "dynamodb://", 1) + "/" + randomName("idemcli_")
	u, err := dynamostore.ParseURL(raw)
	if err != nil {
		t.Fatalf("IDEM_DYNAMODB_URL %q: %v", endpoint, err)
	}
	c, err := u.NewClient(context.Background(), func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		msg := fmt.Sprintf("no DynamoDB-compatible server at %s (IDEM_DYNAMODB_URL): %v", endpoint, err)
		if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg + " (set IDEM_REQUIRE_SERVICES=1 to fail instead)")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &u.Table})
	})
	return raw
}

// TestDynamoDB: --store dynamodb://… is all migrate and the demo need; the
// table is created on the way, and an unreachable server is exit status 1
// with ErrStoreUnavailable's message.
func TestDynamoDB(t *testing.T) {
	raw := dynamoURL(t)
	for range 2 {
		code, stdout, stderr := runArgs(t, "migrate", "--store", raw)
		if code != 0 || !strings.Contains(stdout, "is up to date") {
			t.Fatalf("migrate --store %s: exit status %d\nstdout:\n%s\nstderr:\n%s", raw, code, stdout, stderr)
		}
	}
	code, stdout, stderr := runArgs(t, "demo", "--messages", "200", "--dup-rate", "0.3", "--crash-rate", "0.05", "--seed", "7", "--store", dynamoURL(t))
	if code != 0 || !strings.Contains(stdout, "OK: idem charged every order exactly once") {
		t.Fatalf("demo: exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, _, stderr = runArgs(t, "demo", "--store", "dynamodb://127.0.0.1:1/idem_records")
	if code != 1 || !strings.Contains(stderr, "idem: store unavailable") {
		t.Fatalf("demo on no server: exit status %d, stderr %q; want 1 and ErrStoreUnavailable", code, stderr)
	}
	code, _, stderr = runArgs(t, "demo", "--store", "dynamodb://127.0.0.1:8000/a?b=c")
	if code != 2 || !strings.HasPrefix(stderr, "idem: --store") {
		t.Fatalf("demo with a bad dynamodb URL: exit status %d, stderr %q; want 2", code, stderr)
	}
}
