package demo

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
			o := Options{Messages: 2000, Consumers: 8, DupRate: 0.2, CrashRate: 0.05, Seed: seed, Store: "mem://", StoreName: "mem://", Timeout: time.Minute}
			var out bytes.Buffer
			naive, guarded, err := Run(context.Background(), o, memStore(t), Transport{}, &out, io.Discard)
			if err != nil {
				t.Fatalf("demo: %v\n%s", err, out.String())
			}
			t.Logf("\n%s", out.String())

			if guarded.DoubleCharges != 0 || guarded.Lost != 0 || guarded.Charges != o.Messages {
				t.Errorf("idem: %d charges for %d orders, %d double charges, %d lost; want each order charged once",
					guarded.Charges, o.Messages, guarded.DoubleCharges, guarded.Lost)
			}
			if naive.DoubleCharges == 0 {
				t.Errorf("naive: no double charge despite %d duplicates and %d crashes after the charge",
					naive.Duplicates, naive.Crashes[CrashAfterCharge])
			}
			if naive.Lost != 0 {
				t.Errorf("naive: %d orders lost; an at-least-once broker loses none", naive.Lost)
			}
			// Every naive delivery charges, except those that crashed first.
			if want := naive.Deliveries - int(naive.Crashes[CrashBeforeCharge]); naive.Charges != want {
				t.Errorf("naive: %d charges in %d deliveries with %d crashes before the charge; want %d",
					naive.Charges, naive.Deliveries, naive.Crashes[CrashBeforeCharge], want)
			}
			for _, r := range []Report{naive, guarded} {
				if r.Messages != o.Messages || r.TimedOut {
					t.Errorf("%s: %d messages (timed out: %v), want %d", r.Name, r.Messages, r.TimedOut, o.Messages)
				}
				if r.Duplicates == 0 || r.Deliveries < r.Messages+r.Duplicates {
					t.Errorf("%s: %d deliveries of %d messages and %d duplicates", r.Name, r.Deliveries, r.Messages, r.Duplicates)
				}
				// The crash simulation must keep working at both points.
				if r.Crashes[CrashBeforeCharge] == 0 || r.Crashes[CrashAfterCharge] == 0 {
					t.Errorf("%s: crashes before / after the charge = %d / %d, want some of each",
						r.Name, r.Crashes[CrashBeforeCharge], r.Crashes[CrashAfterCharge])
				}
			}
			// A crash inside Do leaves the order held: only a takeover after
			// the lease ends charges it.
			if guarded.Takeovers == 0 {
				t.Errorf("idem: no takeover after %d crashes before the charge", guarded.Crashes[CrashBeforeCharge])
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
	o := Options{Messages: 500, Consumers: 4, DupRate: 0.3, CrashRate: 0, Seed: 42, Store: "mem://", StoreName: "mem://", Timeout: time.Minute}
	a, _, err := Run(context.Background(), o, memStore(t), Transport{}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := Run(context.Background(), o, memStore(t), Transport{}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if a.Duplicates != b.Duplicates || a.Charges != b.Charges || a.Deliveries != b.Deliveries {
		t.Errorf("two runs of seed 42: %d and %d duplicates, %d and %d charges, %d and %d deliveries; want equal",
			a.Duplicates, b.Duplicates, a.Charges, b.Charges, a.Deliveries, b.Deliveries)
	}
}

func TestTally(t *testing.T) {
	l := NewLedger(5)
	for order, n := range []int{1, 2, 0, 3, 1} {
		for range n {
			l.Charge(order)
		}
	}
	bs := BrokerStats{Deliveries: 9, Duplicates: 2, Unacked: []bool{false, false, false, false, true}}
	r := Tally("x", l, bs, &RunStats{}, time.Second, true)
	if r.Messages != 5 || r.Charges != 7 || r.DoubleCharges != 3 || r.Lost != 2 {
		t.Errorf("tally = %d messages, %d charges, %d double charges, %d lost; want 5, 7, 3 (1+2), 2 (uncharged, unacked)",
			r.Messages, r.Charges, r.DoubleCharges, r.Lost)
	}
}
