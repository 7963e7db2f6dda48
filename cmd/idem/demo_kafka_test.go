package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func TestDemoOverKafkaChargesEveryOrderOnce(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			o := demoOptions{messages: 600, consumers: 6, dupRate: 0.2, crashRate: 0.05, seed: seed, store: "mem://", broker: "kafka", timeout: time.Minute}
			var out bytes.Buffer
			naive, guarded, err := demo(context.Background(), o, &out, io.Discard)
			if err != nil {
				t.Fatalf("demo: %v\n%s", err, out.String())
			}
			t.Logf("\n%s", out.String())
			if guarded.doubleCharges != 0 || guarded.lost != 0 || guarded.charges != o.messages {
				t.Errorf("idem: %d charges for %d orders, %d double charges, %d lost; want each order charged once",
					guarded.charges, o.messages, guarded.doubleCharges, guarded.lost)
			}
			if naive.doubleCharges == 0 || naive.lost != 0 {
				t.Errorf("naive: %d double charges, %d lost; want some double charges and nothing lost", naive.doubleCharges, naive.lost)
			}
			for _, r := range []runReport{naive, guarded} {
				if r.timedOut || r.crashes[crashBeforeCharge] == 0 || r.crashes[crashAfterCharge] == 0 {
					t.Errorf("%s: timed out %v, crashes before / after the charge %d / %d; want no time-out and crashes of both kinds",
						r.name, r.timedOut, r.crashes[crashBeforeCharge], r.crashes[crashAfterCharge])
				}
			}
			if guarded.takeovers == 0 {
				t.Errorf("idem: no takeover after %d crashes before the charge", guarded.crashes[crashBeforeCharge])
			}
			if !strings.Contains(out.String(), "broker: Kafka") || !strings.Contains(out.String(), "OK: idem charged every order exactly once") {
				t.Errorf("output lacks the broker line or the verdict:\n%s", out.String())
			}
		})
	}
}

func TestDemoKafkaBrokerFlag(t *testing.T) {
	if _, err := parseDemoFlags([]string{"--broker", "kafka"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := parseDemoFlags([]string{"--broker", "carrier-pigeon"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--broker") {
		t.Fatalf("parseDemoFlags(--broker carrier-pigeon): %v", err)
	}
}
