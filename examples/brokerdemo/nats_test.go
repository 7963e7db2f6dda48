package main

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemgo/idem/internal/demo"
	"github.com/idemgo/idem/internal/testenv"
)

// natsURL returns the shared NATS server's URL (IDEM_NATS_URL), after
// checking it answers; an unreachable server skips the test, or fails it
// under IDEM_REQUIRE_SERVICES=1.
func natsURL(t *testing.T) string {
	t.Helper()
	server := testenv.Server{Name: "NATS", Env: "IDEM_NATS_URL", Default: nats.DefaultURL}
	url := server.Addr()
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second))
	if err != nil {
		server.Unreachable(t, url, err)
	}
	nc.Close()
	return url
}

// The demo through real JetStream: the naive consumer charges duplicates
// and redeliveries after crashes twice; idemnats charges each order once
// and acks every message.
func TestDemoThroughNATS(t *testing.T) {
	url := natsURL(t)
	o := options{Options: demo.Options{Messages: 400, Consumers: 6, DupRate: 0.2, CrashRate: 0.05, Seed: 11, Store: "mem://", StoreName: "mem://", Timeout: time.Minute},
		broker: url}
	naive, guarded, _ := runChecked(t, o)
	for _, r := range []demo.Report{naive, guarded} {
		crashes := r.Crashes[demo.CrashBeforeCharge] + r.Crashes[demo.CrashAfterCharge]
		if r.Duplicates == 0 || crashes == 0 || r.Deliveries < r.Messages+r.Duplicates {
			t.Errorf("%s: %d deliveries, %d duplicates, %d crashes: the stream did not go through the broker as planned",
				r.Name, r.Deliveries, r.Duplicates, crashes)
		}
	}
}
