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

func TestDemoChargesEveryOrderOnce(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			o := demoOptions{messages: 2000, consumers: 8, dupRate: 0.2, crashRate: 0.05, seed: seed, store: "mem://", timeout: time.Minute}
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
			if naive.doubleCharges == 0 {
				t.Errorf("naive: no double charge despite %d duplicates and %d crashes after the charge",
					naive.duplicates, naive.crashes[crashAfterCharge])
			}
			if naive.lost != 0 {
				t.Errorf("naive: %d orders lost; an at-least-once broker loses none", naive.lost)
			}
			// Every naive delivery charges, except those that crashed first.
			if want := naive.deliveries - int(naive.crashes[crashBeforeCharge]); naive.charges != want {
				t.Errorf("naive: %d charges in %d deliveries with %d crashes before the charge; want %d",
					naive.charges, naive.deliveries, naive.crashes[crashBeforeCharge], want)
			}
			for _, r := range []runReport{naive, guarded} {
				if r.messages != o.messages || r.timedOut {
					t.Errorf("%s: %d messages (timed out: %v), want %d", r.name, r.messages, r.timedOut, o.messages)
				}
				if r.duplicates == 0 || r.deliveries < r.messages+r.duplicates {
					t.Errorf("%s: %d deliveries of %d messages and %d duplicates", r.name, r.deliveries, r.messages, r.duplicates)
				}
				// The crash simulation must keep working at both points.
				if r.crashes[crashBeforeCharge] == 0 || r.crashes[crashAfterCharge] == 0 {
					t.Errorf("%s: crashes before / after the charge = %d / %d, want some of each",
						r.name, r.crashes[crashBeforeCharge], r.crashes[crashAfterCharge])
				}
			}
			// A crash inside Do leaves the order held: only a takeover after
			// the lease ends charges it.
			if guarded.takeovers == 0 {
				t.Errorf("idem: no takeover after %d crashes before the charge", guarded.crashes[crashBeforeCharge])
			}
			if !strings.Contains(out.String(), "OK: idem charged every order once in this run") {
				t.Errorf("output has no verdict:\n%s", out.String())
			}
		})
	}
}

func TestDemoSameSeedSameRun(t *testing.T) {
	// Same seed: same messages, duplicates and crash points, whatever the
	// interleaving; so the counts that do not depend on timing agree.
	o := demoOptions{messages: 500, consumers: 4, dupRate: 0.3, crashRate: 0, seed: 42, store: "mem://", timeout: time.Minute}
	a, _, err := demo(context.Background(), o, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := demo(context.Background(), o, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if a.duplicates != b.duplicates || a.charges != b.charges || a.deliveries != b.deliveries {
		t.Errorf("two runs of seed 42: %d and %d duplicates, %d and %d charges, %d and %d deliveries; want equal",
			a.duplicates, b.duplicates, a.charges, b.charges, a.deliveries, b.deliveries)
	}
}

func TestTally(t *testing.T) {
	l := newLedger(5)
	for order, n := range []int{1, 2, 0, 3, 1} {
		for range n {
			l.charge(order)
		}
	}
	bs := brokerStats{deliveries: 9, duplicates: 2, unacked: []bool{false, false, false, false, true}}
	r := tally("x", l, bs, &runStats{}, time.Second, true)
	if r.messages != 5 || r.charges != 7 || r.doubleCharges != 3 || r.lost != 2 {
		t.Errorf("tally = %d messages, %d charges, %d double charges, %d lost; want 5, 7, 3 (1+2), 2 (uncharged, unacked)",
			r.messages, r.charges, r.doubleCharges, r.lost)
	}
}

func TestOpenStore(t *testing.T) {
	s, closeStore, err := openStore(context.Background(), "mem://", false)
	if err != nil {
		t.Fatal(err)
	}
	if s == nil {
		t.Fatal("openStore(mem://) returned no store")
	}
	if err := closeStore(); err != nil {
		t.Errorf("close: %v", err)
	}
	for _, url := range []string{"", "mysql://127.0.0.1:3306", "mem://x", "%zz", "redis://h/0?x=1", "postgres://h/d?table=A-B"} {
		if _, _, err := openStore(context.Background(), url, false); err == nil || !strings.HasPrefix(err.Error(), "idem: --store") {
			t.Errorf("openStore(%q): error %v, want one starting with \"idem: --store\"", url, err)
		}
	}
}

func TestDemoBrokerFlag(t *testing.T) {
	if _, err := parseDemoFlags([]string{"--broker", "http://127.0.0.1:4222"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--broker") {
		t.Errorf("--broker http://…: error %v, want a usage error naming --broker", err)
	}
	for _, url := range []string{"nats://127.0.0.1:4222", "amqp://guest:guest@127.0.0.1:5672/"} {
		if o, err := parseDemoFlags([]string{"--broker", url}, io.Discard); err != nil || o.broker != url {
			t.Errorf("--broker %s: %+v, %v", url, o, err)
		}
	}
}
