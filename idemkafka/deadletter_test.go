package idemkafka_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemkafka"
)

// readAll returns the records of topic's partition 0, waiting until there
// are n.
func readAll(t testing.TB, c *cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("%d records on %s, want %d", len(out), topic, n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func header(r *kgo.Record, name string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value), true
		}
	}
	return "", false
}

func TestPoisonRecordsGoToDeadLetterTopic(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	topic, group, dlq := c.Name("orders"), c.Name("payments"), c.Name("orders.dlq")
	declined := errors.New("card declined")
	twoKeys := keyed(topic, 0, "k-a", "v")
	twoKeys.Headers = append(twoKeys.Headers, kgo.RecordHeader{Key: idemkafka.DefaultKeyHeader, Value: []byte("k-b")})
	recs := []*kgo.Record{
		keyed(topic, 0, "ok-1", "v1"),
		keyed(topic, 0, "declined", "v2"),          // permanent error
		{Topic: topic, Value: []byte("no key")},    // no key
		twoKeys,                                    // two keys that disagree
		keyed(topic, 0, "ok-1", "another payload"), // key reused with another payload
		keyed(topic, 0, "flaky", "v6"),             // fails until MaxAttempts
		keyed(topic, 0, "ok-2", "v7"),              // consumption goes on
	}
	produce(t, c, recs...)
	l := newLedger()
	g := newGuard(t, newMem(t), idem.Config{MaxAttempts: 3})
	start(t, c, group, topic, g, func(ctx context.Context, r *kgo.Record) error {
		switch headerKey(r) {
		case "declined":
			return idem.Permanent(declined)
		case "flaky":
			return errors.New("provider timed out")
		}
		return l.handler(ctx, r)
	}, idemkafka.WithSharedScope(), idemkafka.WithDeadLetter(dlq), idemkafka.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))

	dead := readAll(t, c, dlq, 5)
	wantCommitted(t, c, group, topic)
	l.wantOnce(t, []string{"ok-1", "ok-2"})
	want := []struct {
		offset int64
		key    string // "" for none
		cause  string // a part of the cause
		reason string
	}{
		{1, "declined", "card declined", "permanent"},
		{2, "", "no idempotency key", "missing-key"},
		{3, "", "sent 2 times", "invalid-key"},
		{4, "ok-1", "reused", "key-reused"},
		{5, "flaky", "too many attempts", "too-many-attempts"},
	}
	for i, w := range want {
		d := dead[i]
		if string(d.Value) != string(recs[w.offset].Value) {
			t.Errorf("dead letter %d: value %q, want the original %q", i, d.Value, recs[w.offset].Value)
		}
		if v, _ := header(d, idemkafka.HeaderOffset); v != strconv.FormatInt(w.offset, 10) {
			t.Errorf("dead letter %d: offset header %q, want %d", i, v, w.offset)
		}
		if v, _ := header(d, idemkafka.HeaderTopic); v != topic {
			t.Errorf("dead letter %d: topic header %q, want %q", i, v, topic)
		}
		if v, _ := header(d, idemkafka.HeaderPartition); v != "0" {
			t.Errorf("dead letter %d: partition header %q, want 0", i, v)
		}
		if v, ok := header(d, consumer.HeaderKey); v != w.key || ok != (w.key != "") {
			t.Errorf("dead letter %d: key header %q (present %v), want %q", i, v, ok, w.key)
		}
		if v, _ := header(d, consumer.HeaderReason); v != w.reason {
			t.Errorf("dead letter %d: reason %q, want %q", i, v, w.reason)
		}
		if v, _ := header(d, consumer.HeaderCause); !strings.Contains(v, w.cause) {
			t.Errorf("dead letter %d: cause %q, want it to say %q", i, v, w.cause)
		}
	}
}
