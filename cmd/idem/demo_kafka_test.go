package main

import (
	"bytes"
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

	"github.com/idemgo/idem/internal/testenv"
)

// TestDemoOverKafkaChargesEveryOrderOnce runs the demo with --brokers on
// Apache Kafka (IDEM_KAFKA_BROKERS), two seeds, and checks the verdict
// and that the demo deleted the topics it created.
func TestDemoOverKafkaChargesEveryOrderOnce(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			o := demoOptions{messages: 600, consumers: 6, dupRate: 0.2, crashRate: 0.05, seed: seed, store: "mem://",
				broker: "kafka", brokers: strings.Join(brokers, ","), timeout: 2 * time.Minute}
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

// TestDemoKafkaNeedsBrokers: --broker kafka without --brokers is a usage
// error that says what to run instead; the operator's binary links no
// fake broker.
func TestDemoKafkaNeedsBrokers(t *testing.T) {
	o := demoOptions{messages: 10, consumers: 1, store: "mem://", broker: "kafka", timeout: time.Minute}
	_, _, err := demo(context.Background(), o, io.Discard, io.Discard)
	if _, ok := errors.AsType[*usageError](err); !ok || !strings.Contains(err.Error(), "--brokers") || !strings.Contains(err.Error(), "examples/payments") {
		t.Fatalf("demo --broker kafka without --brokers: %v, want a usage error naming --brokers and examples/payments", err)
	}
}

// checkKafkaDemo runs the Kafka demo of o, checks what a user reads in its
// verdict, and returns its output.
func checkKafkaDemo(t *testing.T, o demoOptions) string {
	t.Helper()
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
	if !strings.Contains(out.String(), "broker: Kafka") || !strings.Contains(out.String(), "OK: idem charged every order once in this run") {
		t.Errorf("output lacks the broker line or the verdict:\n%s", out.String())
	}
	return out.String()
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

func TestDemoKafkaBrokerFlag(t *testing.T) {
	if _, err := parseDemoFlags([]string{"--broker", "kafka"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := parseDemoFlags([]string{"--broker", "carrier-pigeon"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--broker") {
		t.Fatalf("parseDemoFlags(--broker carrier-pigeon): %v", err)
	}
	o, err := parseDemoFlags([]string{"--broker", "kafka", "--brokers", "k1:9092,k2:9092"}, io.Discard)
	if err != nil || o.brokers != "k1:9092,k2:9092" {
		t.Fatalf("parseDemoFlags(--broker kafka --brokers k1:9092,k2:9092) = brokers %q, %v", o.brokers, err)
	}
	if _, err := parseDemoFlags([]string{"--brokers", "k1:9092"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--broker kafka") {
		t.Fatalf("parseDemoFlags(--brokers without --broker kafka): %v", err)
	}
}
