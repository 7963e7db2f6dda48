package testenv_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/testenv"
)

var broker = testenv.Server{Name: "Broker", Env: "IDEM_TESTENV_TEST_ADDR", Default: "127.0.0.1:1"}

func TestAddrIsTheVariableOrTheDefault(t *testing.T) {
	t.Setenv(broker.Env, "")
	if got := broker.Addr(); got != broker.Default {
		t.Errorf("Addr with %s empty = %q, want the default %q", broker.Env, got, broker.Default)
	}
	t.Setenv(broker.Env, "10.0.0.1:9")
	if got := broker.Addr(); got != "10.0.0.1:9" {
		t.Errorf("Addr with %s set = %q, want its value", broker.Env, got)
	}
}

func TestUnreachableSkipsOrFails(t *testing.T) {
	refused := errors.New("connection refused")
	skip, fatal := testenv.CheckUnreachable(t, broker.Env, func(tb testing.TB) {
		broker.Unreachable(tb, broker.Addr(), refused)
		tb.Error("Unreachable returned")
	})
	for _, want := range []string{"Broker", broker.Default, "connection refused", testenv.RequireServicesEnv} {
		if !strings.Contains(skip, want) {
			t.Errorf("skip message %q does not name %q", skip, want)
		}
	}
	for _, want := range []string{"Broker", broker.Default, "connection refused"} {
		if !strings.Contains(fatal, want) {
			t.Errorf("failure %q does not name %q", fatal, want)
		}
	}
}

// A helper that ignores the rule fails CheckUnreachable.
func TestCheckUnreachableCatchesAHelperThatPasses(t *testing.T) {
	end := testenv.Record(t, func(tb testing.TB) {
		testenv.CheckUnreachable(tb, broker.Env, func(testing.TB) {})
	})
	if len(end.Errors) != 2 {
		t.Errorf("CheckUnreachable of a helper that neither skips nor fails reported %q, want two errors", end.Errors)
	}
}

func TestRecordRunsCleanupsAndKeepsErrors(t *testing.T) {
	var order []string
	end := testenv.Record(t, func(tb testing.TB) {
		tb.Cleanup(func() { order = append(order, "first") })
		tb.Cleanup(func() { order = append(order, "second") })
		tb.Errorf("e%d", 1)
		if !tb.Failed() {
			t.Error("Failed after Errorf = false")
		}
		tb.FailNow()
		order = append(order, "after FailNow")
	})
	if got := strings.Join(order, ","); got != "second,first" {
		t.Errorf("cleanups and code ran as %q, want second,first and nothing after FailNow", got)
	}
	if end.Fatal == "" || fmt.Sprint(end.Errors) != "[e1]" || end.Skip != "" {
		t.Errorf("ending %+v, want a failure with the error e1", end)
	}
}

func TestKafkaBrokersSkipsOrFailsWhenNoneAnswers(t *testing.T) {
	t.Setenv(testenv.Kafka.Env, "127.0.0.1:1, 127.0.0.1:2")
	skip, fatal := testenv.CheckUnreachable(t, testenv.Kafka.Env, func(tb testing.TB) {
		testenv.KafkaBrokers(tb)
		tb.Error("KafkaBrokers returned")
	})
	for _, msg := range []string{skip, fatal} {
		if !strings.Contains(msg, "127.0.0.1:2") || !strings.Contains(msg, "Apache Kafka") {
			t.Errorf("message %q does not name the server and its addresses", msg)
		}
	}
}

func TestSplitBrokers(t *testing.T) {
	got := fmt.Sprint(testenv.SplitBrokers(" a:1,, b:2 ,"))
	if got != "[a:1 b:2]" {
		t.Errorf("SplitBrokers = %s, want [a:1 b:2]", got)
	}
}
