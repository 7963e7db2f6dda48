package outboxkafka_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// TestARecordTooLargeIsPermanent: Apache Kafka refuses a record over its
// message.max.bytes (about 1 MiB by default) with MESSAGE_TOO_LARGE, and
// so does the client before sending one over its ProducerBatchMaxBytes.
// Either way the record fails as permanent and the other records of the
// call do not, nor are they charged for it (the broker refuses the whole
// batch the record shares with them); a relay moves its row to the dead
// rows and publishes the others, each key's in order.
func TestARecordTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	brokers := testenv.KafkaBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer cancel()
	run := outboxtest.NewRunID()
	big := make([]byte, 3<<20/2) // 1.5 MiB, random: compressed, as large
	rand.Read(big)
	// A client whose batches may hold the record: the broker refuses it.
	brokerSide := []kgo.Opt{kgo.ProducerBatchMaxBytes(4 << 20), kgo.BrokerMaxWriteBytes(8 << 20)}
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"by the client", nil},
		{"by the broker", brokerSide},
	} {
		pub := newPublisher(t, newClient(t, brokers, tc.opts...))
		topic := topic(t, brokers, 1)
		err := pub.Publish(ctx, []outbox.Message{
			{ID: "big-" + run, Destination: topic, Key: "a", Payload: big},
			{ID: "small-" + run, Destination: topic, Key: "b", Payload: []byte("s")},
		})
		pe, ok := errors.AsType[*outbox.PublishError](err)
		if !ok || !outbox.IsPermanent(pe.Errs[0]) || !errors.Is(pe.Errs[0], kerr.MessageTooLarge) {
			t.Fatalf("%s: Publish(1.5 MiB, small) = %v, want the first failed as permanent (MESSAGE_TOO_LARGE)", tc.name, err)
		}
		// The broker refuses the batch the small record shares with the
		// large one: its failure is not its own.
		if small := pe.Errs[1]; small != nil && !errors.Is(small, outbox.ErrHeldBack) {
			t.Errorf("%s: the small record of another key: %v, want published or held back", tc.name, small)
		}
	}

	pub := newPublisher(t, newClient(t, brokers, brokerSide...))
	topic := topic(t, brokers, 1)
	got := consume(t, brokers, topic)
	pool := pgstoretest.Pool(t, 4)
	table := outboxtest.Table(t, pool)
	msgs, want := outboxtest.Messages(20, 3, topic)
	poison := outbox.Message{ID: "relayed-big-" + run, Destination: topic, Key: "key-1", Payload: big}
	msgs = append(msgs[:10], append([]outbox.Message{poison}, msgs[10:]...)...)
	ob, err := outbox.New(outbox.Config{Table: table, MaxPayload: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Enqueue(ctx, pool, msgs...); err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Table: table, BatchSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RunRelay(t, relay)
	outboxtest.AwaitPending(t, pool, table, 0)
	dead, err := outbox.Dead(ctx, pool, table, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Message.ID != poison.ID || dead[0].Attempts != 1 || !strings.Contains(dead[0].LastError, "MESSAGE_TOO_LARGE") {
		t.Fatalf("dead rows %+v, want %s after 1 attempt, with its error", dead, poison.ID)
	}
	if n := outboxtest.Charged(t, pool, table); n > 0 {
		t.Errorf("%d good records were charged failed attempts, want 0", n)
	}
	ids := make([]string, 0, 20)
	for len(ids) < 20 {
		select {
		case r := <-got:
			ids = append(ids, r.ID)
		case <-ctx.Done():
			t.Fatalf("consumed %d of the 20 good records", len(ids))
		}
	}
	outboxtest.CheckOrder(t, want, ids)
}
