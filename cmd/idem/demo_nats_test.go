package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
	o := demoOptions{messages: 400, consumers: 6, dupRate: 0.2, crashRate: 0.05, seed: 11, store: "mem://", broker: url, timeout: time.Minute}
	var out strings.Builder
	naive, guarded, err := demo(context.Background(), o, &out, io.Discard)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	if guarded.doubleCharges != 0 || guarded.lost != 0 || guarded.charges != o.messages {
		t.Errorf("idem: %d charges for %d orders, %d double charges, %d lost", guarded.charges, o.messages, guarded.doubleCharges, guarded.lost)
	}
	if naive.doubleCharges == 0 || naive.lost != 0 {
		t.Errorf("naive: %d double charges, %d lost; want some double charges and nothing lost", naive.doubleCharges, naive.lost)
	}
	for _, r := range []runReport{naive, guarded} {
		if r.duplicates == 0 || r.crashCount() == 0 || r.deliveries < r.messages+r.duplicates {
			t.Errorf("%s: %d deliveries, %d duplicates, %d crashes: the stream did not go through the broker as planned",
				r.name, r.deliveries, r.duplicates, r.crashCount())
		}
	}
	if guarded.takeovers == 0 {
		t.Errorf("idem: no takeover after %d crashes before the charge", guarded.crashes[crashBeforeCharge])
	}
}

func TestDemoBrokerFlag(t *testing.T) {
	if _, err := parseDemoFlags([]string{"--broker", "kafka://127.0.0.1:9092"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--broker") {
		t.Errorf("--broker kafka://…: error %v, want a usage error naming --broker", err)
	}
	for _, url := range []string{"nats://127.0.0.1:4222", "amqp://guest:guest@127.0.0.1:5672/"} {
		if o, err := parseDemoFlags([]string{"--broker", url}, io.Discard); err != nil || o.broker != url {
			t.Errorf("--broker %s: %+v, %v", url, o, err)
		}
	}
}
