package main

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// TestMain makes the test binary the consumer too: the harness starts it
// again with the consumer's spec in the environment.
func TestMain(m *testing.M) {
	if os.Getenv(specEnv) != "" {
		os.Exit(consumeMain())
	}
	goleak.VerifyTestMain(m)
}

// logWriter sends the harness's progress to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// needServices skips t (fails it under IDEM_REQUIRE_SERVICES=1) unless
// PostgreSQL, redis-server and every broker built in can be used.
func needServices(t *testing.T) []string {
	t.Helper()
	pgstoretest.Pool(t, 1)
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Unavailable(t, "redis-server is not installed: %v", err)
	}
	names := slices.Sorted(maps.Keys(brokers))
	if len(names) == 0 {
		t.Fatal("no broker is built into the harness")
	}
	for _, n := range names {
		b, err := brokers[n]("probe")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.probe(t.Context()); err != nil {
			testenv.Unavailable(t, "%s: %v", n, err)
		}
	}
	return names
}

// suite runs cfgs with this test binary as the consumer.
func suite(t *testing.T, cfgs []runConfig) []*report {
	t.Helper()
	res, err := runSuite(context.WithoutCancel(t.Context()), []string{os.Args[0]}, runs{broker: cfgs}, logWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	return res.broker
}

// TestShortProfile is the suite's short profile, part of make test: on
// every broker built in, pgstore's transactional mode and Redis (losing
// everything in a restart) with a fenced side effect, which must show
// exactly one effect per message, and pgstore with an unfenced one, whose
// duplicates must each follow a kill or fault in the window. On Kafka,
// whose cluster the harness starts for each run and crashes once, only
// kafkapg's run (pgtx-tx): make faults runs the others.
func TestShortProfile(t *testing.T) {
	cfgs, err := profile("short", needServices(t))
	if err != nil {
		t.Fatal(err)
	}
	cfgs = slices.DeleteFunc(cfgs, func(c runConfig) bool { return c.Broker == "kafka" && c.Store != storePGTx })
	for _, r := range suite(t, cfgs) {
		if !r.ok() {
			t.Errorf("%s: %s", r.cfg.Name, strings.Join(r.Failures, "; "))
		}
	}
}

// TestBrokenBuildsFail shows the suite catches a consumer that breaks the
// rules: one that acks before the outcome is stored loses messages, one
// that drops the token check applies duplicates, one that writes the side
// effect outside pgstore's transaction applies duplicates. It runs on NATS,
// where the broken build's early ack waits for the server's confirmation,
// so the loss does not depend on the ack's race with the kill (AMQP acks
// have no confirmation).
func TestBrokenBuildsFail(t *testing.T) {
	have := needServices(t)
	cases := []struct {
		broker, broken, config, want string
		noDuplicates                 bool // a published duplicate would make up for the lost message
	}{
		{"nats", brokenAckFirst, "pg-unfenced", "messages lost", true},
		{"nats", brokenNoFence, "redis-noaof-fenced", "duplicate effects where exactly one is promised", false},
		{"nats", brokenOutsideTx, "pgtx-tx", "duplicate effects where exactly one is promised", false},
	}
	for _, tc := range cases {
		if !slices.Contains(have, tc.broker) {
			t.Fatalf("the %s broker is not built into the harness", tc.broker)
		}
		cfgs, err := profile("short", []string{tc.broker})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(cfgs, func(c runConfig) bool { return strings.HasSuffix(c.Name, "/"+tc.config) })
		cfg := cfgs[i]
		cfg.Broken, cfg.Name = tc.broken, cfg.Name+" broken="+tc.broken
		if tc.noDuplicates {
			cfg.Duplicates = 0
		}
		r := suite(t, []runConfig{cfg})[0]
		if got := strings.Join(r.Failures, "; "); !strings.Contains(got, tc.want) {
			t.Errorf("%s: the suite said %q, want a failure naming %q", cfg.Name, got, tc.want)
		}
	}
}

// TestFailoverShortProfile is the failover runs' short profile, part of
// make test: a Redis primary with two replicas and three Sentinels, the
// primary SIGKILLed while a Guard's workers run with WaitReplicas 1, and a
// PostgreSQL primary with a synchronous standby, the primary SIGKILLed and
// the standby promoted. Neither may lose an outcome Do returned, or a key.
func TestFailoverShortProfile(t *testing.T) {
	pgstoretest.Pool(t, 1)
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Unavailable(t, "redis-server is not installed: %v", err)
	}
	if _, err := pgBinDir(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	res, err := runSuite(context.WithoutCancel(t.Context()), []string{os.Args[0]}, runs{failover: failoverProfile("short")}, logWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.failover {
		if !r.ok() || r.LostOutcomes > 0 || r.Lost > 0 {
			t.Errorf("%s: %d returned outcomes lost, %d keys lost: %s", r.cfg.Name, r.LostOutcomes, r.Lost, r.verdict(true))
		}
	}
}
