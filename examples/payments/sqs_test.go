package main

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/internal/testenv"
)

// The SQS example against the development machine's SQS-compatible
// server (moto): every order is charged once, though some charges last
// longer than the queue's visibility timeout; the duplicates are deleted
// without a charge; the malformed event is dead-lettered.
func TestSQSPayments(t *testing.T) {
	server := testenv.Server{Name: "An SQS-compatible server", Env: "IDEM_SQS_URL", Default: "http://127.0.0.1:4566"}
	u, err := url.Parse(server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
	if err != nil {
		server.Unreachable(t, server.Addr(), err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := runSQS(ctx, "sqs://"+u.Host, &out, []string{"-orders", "12", "-dup-rate", "0.5"}); err != nil {
		t.Fatalf("runSQS: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"for 12 orders: 11 charged, 0 charged twice,",
		"1 dead-lettered (1 in",
		`order-0002, reason permanent, cause "not an OrderCreated event: json: cannot unmarshal`,
		"in 3s (charge #1 of this order)",
		"OK: every order charged once",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(out.String(), "is a duplicate: deleted, not charged again") {
		t.Errorf("no duplicate was deleted as one:\n%s", out.String())
	}
}
