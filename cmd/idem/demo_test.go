package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/cli"
)

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

// The broker demos moved to the examples module: --broker says where.
func TestDemoBrokerFlagPointsAtTheBrokerDemo(t *testing.T) {
	for _, args := range [][]string{{"--broker", "kafka", "--brokers", "127.0.0.1:9092"}, {"--broker", "nats://127.0.0.1:4222"}} {
		_, err := parseDemoFlags(args, io.Discard)
		if _, ok := err.(*cli.UsageError); !ok || !strings.Contains(err.Error(), "go run ./brokerdemo") {
			t.Errorf("%q: error %v, want a usage error naming go run ./brokerdemo", args, err)
		}
	}
}
