package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/internal/demo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runChecked runs the demo of o, fails the test when it fails, logs its
// output, and checks what every broker's run shows: idem charged each
// order once and took over after crashes, the naive consumer
// double-charged some orders and lost none. It returns both reports and
// the output.
func runChecked(t *testing.T, o options) (naive, guarded demo.Report, out string) {
	t.Helper()
	var b strings.Builder
	naive, guarded, err := runDemo(context.Background(), o, &b, io.Discard)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, b.String())
	}
	t.Logf("\n%s", b.String())
	if guarded.DoubleCharges != 0 || guarded.Lost != 0 || guarded.Charges != o.Messages {
		t.Errorf("idem: %d charges for %d orders, %d double charges, %d lost; want each order charged once",
			guarded.Charges, o.Messages, guarded.DoubleCharges, guarded.Lost)
	}
	if naive.DoubleCharges == 0 || naive.Lost != 0 {
		t.Errorf("naive: %d double charges, %d lost; want some double charges and nothing lost", naive.DoubleCharges, naive.Lost)
	}
	if guarded.Takeovers == 0 {
		t.Errorf("idem: no takeover after %d crashes before the charge", guarded.Crashes[demo.CrashBeforeCharge])
	}
	return naive, guarded, b.String()
}
