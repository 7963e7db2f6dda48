package testenv

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Kafka is the Apache Kafka of the tests: IDEM_KAFKA_BROKERS, seed brokers
// as a comma-separated list of host:port, by default the single node that
// scripts/services.sh starts.
var Kafka = Server{Name: "Apache Kafka", Env: "IDEM_KAFKA_BROKERS", Default: "127.0.0.1:9092"}

// KafkaBrokers returns the seed brokers of IDEM_KAFKA_BROKERS once one of
// them accepts a TCP connection. When none does it ends tb the way
// [Server.Unreachable] does: a skip, or a failure under
// IDEM_REQUIRE_SERVICES=1. It only dials: what answers is taken to be
// Kafka, and a test that finds otherwise fails on its first request.
func KafkaBrokers(tb testing.TB) []string {
	tb.Helper()
	addr := Kafka.Addr()
	brokers := SplitBrokers(addr)
	if err := kafkaProbe(addr); err != nil {
		Kafka.Unreachable(tb, addr, err)
	}
	return brokers
}

// SplitBrokers splits a comma-separated list of host:port, dropping blanks.
func SplitBrokers(list string) []string {
	var out []string
	for _, b := range strings.Split(list, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// kafkaProbes holds, by the variable's value, whether a broker answered:
// dialled once per value and test binary.
var kafkaProbes sync.Map // string → func() error

func kafkaProbe(list string) error {
	probe, _ := kafkaProbes.LoadOrStore(list, sync.OnceValue(func() error {
		brokers := SplitBrokers(list)
		if len(brokers) == 0 {
			return errors.New("no broker address")
		}
		var errs []error
		for _, b := range brokers {
			c, err := net.DialTimeout("tcp", b, 5*time.Second)
			if err == nil {
				return c.Close()
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}))
	return probe.(func() error)()
}
