package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The one-command run: an in-process cluster, orders with duplicates, one
// charge each.
func TestInProcessRunChargesEachOrderOnce(t *testing.T) {
	o, err := parseFlags([]string{"--orders", "40", "--dup-rate", "0.5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := runKafka(ctx, o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	for _, want := range []string{"started an in-process Kafka cluster (kfake)", "40 orders charged, 0 double charges"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, &out)
		}
	}
	if n := strings.Count(out.String(), "charged order-"); n != 40 {
		t.Fatalf("%d charges printed for 40 orders:\n%s", n, &out)
	}
}

// With --brokers, against Apache Kafka (IDEM_KAFKA_BROKERS): the producer
// publishes duplicates, the consumer charges each order once.
func TestProduceThenConsumeWithBrokers(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := kafkaTopic(t, brokers, "idemtest.payments", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o, err := parseFlags([]string{"--brokers", strings.Join(brokers, ","), "--topic", topic, "--group", topic + ".group",
		"--orders", "30", "produce"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runKafka(ctx, o, &out); err != nil {
		t.Fatal(err)
	}
	events, dups := newOrders(o.orders, o.dupRate, o.seed)
	if dups == 0 {
		t.Fatal("the producer published no duplicates")
	}
	o.mode = "consume"
	p := newProvider(io.Discard)
	finished, err := consumeOrders(ctx, brokers, o, io.Discard, p, len(events))
	if err != nil {
		t.Fatal(err)
	}
	if charged, double := p.summary(o.orders); finished != int64(len(events)) || charged != 30 || double != 0 {
		t.Fatalf("%d events finished, %d orders charged, %d double charges; want %d, 30, 0", finished, charged, double, len(events))
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error; "" for none
	}{
		{nil, ""},
		{[]string{"--brokers", "k:9092"}, ""},
		{[]string{"--brokers", "k:9092", "produce"}, ""},
		{[]string{"produce"}, "needs --brokers"},
		{[]string{"--brokers", "k:9092", "dance"}, "consume or produce"},
		{[]string{"--broker", "carrier-pigeon"}, "kafka, a nats:// URL, an amqp:// URL or an sqs:// endpoint"},
		{[]string{"--broker", "nats://127.0.0.1:4222", "--", "-payments", "5"}, ""},
		{[]string{"--dup-rate", "2"}, "--dup-rate"},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q): %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestUndecodableEventIsPermanent(t *testing.T) {
	p := newProvider(io.Discard)
	if err := p.handle(context.Background(), []byte("{not json")); err == nil || !strings.Contains(err.Error(), "not an OrderCreated") {
		t.Fatalf("handle: %v", err)
	}
}
