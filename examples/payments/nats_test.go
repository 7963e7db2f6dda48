package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemgo/idem/internal/testenv"
)

// The NATS example against the development machine's server: every
// payment is charged once, the resends are acked as duplicates, the
// malformed one is dead-lettered.
func TestNATSPayments(t *testing.T) {
	server := testenv.Server{Name: "NATS", Env: "IDEM_NATS_URL", Default: nats.DefaultURL}
	url := server.Addr()
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second))
	if err != nil {
		server.Unreachable(t, url, err)
	}
	nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := runNATS(ctx, url, &out, []string{"-payments", "6", "-resend", "2"}); err != nil {
		t.Fatalf("runNATS: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"published 12 payment requests; 4 resent at once, dropped by the stream's duplicate window",
		"12 payments: 11 charged, 0 charged twice, 4 duplicates acked without a charge, 1 dead-lettered (1 in",
		"OK: every payment charged once",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
}
