package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem/internal/cli"
	"github.com/idemgo/idem/internal/demo"
	"github.com/idemgo/idem/internal/testenv"
)

// TestDemoOverKafkaChargesEveryOrderOnce runs the demo with --brokers on
// Apache Kafka (IDEM_KAFKA_BROKERS), two seeds, and checks the verdict
// and that the demo deleted the topics it created.
func TestDemoOverKafkaChargesEveryOrderOnce(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			o := options{Options: demo.Options{Messages: 600, Consumers: 6, DupRate: 0.2, CrashRate: 0.05, Seed: seed, Store: "mem://",
				StoreName: "mem://", Timeout: 2 * time.Minute}, broker: "kafka", brokers: brokers}
			out := checkKafkaDemo(t, o)
			m := regexp.MustCompile(`topics (\S+) and (\S+) of`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("output names no topics:\n%s", out)
			}
			if !strings.Contains(out, "broker: Kafka at "+strings.Join(brokers, ",")) {
				t.Errorf("output lacks the brokers:\n%s", out)
			}
			awaitTopicsGone(t, brokers, m[1], m[2])
		})
	}
}

// checkKafkaDemo runs the Kafka demo of o, checks what a user reads in its
// verdict, and returns its output.
func checkKafkaDemo(t *testing.T, o options) string {
	t.Helper()
	naive, guarded, out := runChecked(t, o)
	for _, r := range []demo.Report{naive, guarded} {
		if r.TimedOut || r.Crashes[demo.CrashBeforeCharge] == 0 || r.Crashes[demo.CrashAfterCharge] == 0 {
			t.Errorf("%s: timed out %v, crashes before / after the charge %d / %d; want no time-out and crashes of both kinds",
				r.Name, r.TimedOut, r.Crashes[demo.CrashBeforeCharge], r.Crashes[demo.CrashAfterCharge])
		}
	}
	if !strings.Contains(out, "broker: Kafka") || !strings.Contains(out, "OK: idem charged every order once in this run") {
		t.Errorf("output lacks the broker line or the verdict:\n%s", out)
	}
	return out
}

// awaitTopicsGone waits until the brokers' metadata lists none of the
// topics named.
func awaitTopicsGone(t *testing.T, brokers []string, names ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		req := kmsg.NewPtrMetadataRequest()
		for _, name := range names {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(name)
			req.Topics = append(req.Topics, rt)
		}
		var left []string
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			for _, rt := range resp.Topics {
				if rt.ErrorCode != kerr.UnknownTopicOrPartition.Code && rt.Topic != nil {
					left = append(left, *rt.Topic)
				}
			}
			if len(left) == 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the demo's topics are still there: %v (%v)", left, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestBrokerFlags(t *testing.T) {
	o, err := parseFlags([]string{"--broker", "kafka", "--brokers", "k1:9092, k2:9092"}, io.Discard)
	if err != nil || strings.Join(o.brokers, ",") != "k1:9092,k2:9092" {
		t.Fatalf("--broker kafka --brokers k1:9092,k2:9092: brokers %q, %v", o.brokers, err)
	}
	for _, url := range []string{"nats://127.0.0.1:4222", "amqp://guest:guest@127.0.0.1:5672/"} {
		if o, err := parseFlags([]string{"--broker", url}, io.Discard); err != nil || o.broker != url {
			t.Errorf("--broker %s: %+v, %v", url, o, err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--broker"},
		{[]string{"--broker", "carrier-pigeon"}, "--broker"},
		{[]string{"--broker", "http://127.0.0.1:4222"}, "--broker"},
		{[]string{"--brokers", "k1:9092"}, "--broker kafka"},
		// Without --brokers, it says where a consumer runs on an
		// in-process cluster instead.
		{[]string{"--broker", "kafka"}, "go run ./payments"},
		{[]string{"--broker", "kafka", "--brokers", "k1:9092", "--messages", "0"}, "--messages"},
	} {
		_, err := parseFlags(c.args, io.Discard)
		if _, ok := errors.AsType[*cli.UsageError](err); !ok || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error naming %s", c.args, err, c.want)
		}
	}
}
