package idemnats_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemnats"
)

// deadLetters returns the messages of the dead-letter stream s.
func deadLetters(t *testing.T, s jetstream.Stream) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("dead letter %d: %v", seq, err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func streamMsgs(t *testing.T, s jetstream.Stream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Poison is dead-lettered with its cause and terminated, once, and never
// comes back: a permanent error (and a later copy of its key), a key that
// keeps failing past the Guard's MaxAttempts, a message without a key or
// with an empty one, a key reused with other data. The good messages
// around them are handled. The dead letters keep the original's headers
// and say where it came from.
func TestPoisonIsDeadLettered(t *testing.T) {
	t.Parallel()
	_, js := connect(t, natsURL)
	s := newStream(t, js, jetstream.StreamConfig{})
	dlq := newStream(t, js, jetstream.StreamConfig{})
	cons := newConsumer(t, s, jetstream.ConsumerConfig{})

	calls := map[string]*counter{"good": {}, "bad": {}, "flaky": {}, "reused": {}, "": {}}
	g := newGuard(t, memStore(t), idem.Config{MaxAttempts: 2})
	run(t, g, cons, func(ctx context.Context, msg jetstream.Msg) error {
		key := msg.Headers().Get("Idempotency-Key")
		calls[key].Add(1)
		switch key {
		case "bad":
			return idem.Permanent(errors.New("card declined:\r\nno funds"))
		case "flaky":
			return errors.New("upstream timeout")
		}
		return nil
	}, idemnats.WithSharedScope(), idemnats.WithKeyHeader("Idempotency-Key"), idemnats.WithDeadLetter(js, subject(dlq, "dead")),
		idemnats.WithRetryBackoff(10*time.Millisecond, 10*time.Millisecond))

	in := subject(s, "payments")
	publish(t, js, in, "pay 1", "Idempotency-Key", "good")
	publish(t, js, in, "pay 2", "Idempotency-Key", "bad", "Tenant", "t1")
	publish(t, js, in, "pay 3", "Idempotency-Key", "flaky")
	publish(t, js, in, "pay 4") // no key
	publish(t, js, in, "pay 5", "Idempotency-Key", "reused")
	publish(t, js, in, "pay 6", "Idempotency-Key", "") // an unusable key
	waitFor(t, 20*time.Second, "every message settled and four dead letters", func() bool {
		return drained(t, cons) && streamMsgs(t, dlq) == 4
	})
	// Later copies of used keys: one with other data, one of the poison.
	publish(t, js, in, "pay 5 again", "Idempotency-Key", "reused")
	publish(t, js, in, "pay 2", "Idempotency-Key", "bad", jetstream.MsgIDHeader, "bad-copy")
	waitFor(t, 20*time.Second, "every message settled and six dead letters", func() bool {
		return drained(t, cons) && streamMsgs(t, dlq) == 6
	})
	for key, want := range map[string]int64{"good": 1, "bad": 1, "flaky": 2, "reused": 1, "": 0} {
		if got := calls[key].Load(); got != want {
			t.Errorf("handler ran %d times for key %q, want %d", got, key, want)
		}
	}
	got := map[string][]*jetstream.RawStreamMsg{}
	for _, m := range deadLetters(t, dlq) {
		got[m.Header.Get(consumer.HeaderReason)] = append(got[m.Header.Get(consumer.HeaderReason)], m)
	}
	want := map[consumer.Reason][]string{ // data of the dead letters, by reason
		consumer.ReasonPermanent:       {"pay 2", "pay 2"},
		consumer.ReasonTooManyAttempts: {"pay 3"},
		consumer.ReasonMissingKey:      {"pay 4"},
		consumer.ReasonInvalidKey:      {"pay 6"},
		consumer.ReasonKeyReused:       {"pay 5 again"},
	}
	for reason, datas := range want {
		ms := got[string(reason)]
		if len(ms) != len(datas) {
			t.Errorf("%d dead letters for %s, want %d", len(ms), reason, len(datas))
			continue
		}
		for i, m := range ms {
			if string(m.Data) != datas[i] {
				t.Errorf("dead letter %d for %s holds %q, want %q", i, reason, m.Data, datas[i])
			}
			if m.Header.Get(idemnats.HeaderStream) != s.CachedInfo().Config.Name || m.Header.Get(idemnats.HeaderSubject) != in {
				t.Errorf("dead letter for %s says it came from %q/%q", reason, m.Header.Get(idemnats.HeaderStream), m.Header.Get(idemnats.HeaderSubject))
			}
			if _, err := strconv.ParseUint(m.Header.Get(idemnats.HeaderSequence), 10, 64); err != nil {
				t.Errorf("dead letter for %s: original sequence %q", reason, m.Header.Get(idemnats.HeaderSequence))
			}
		}
	}
	if bad := got[string(consumer.ReasonPermanent)]; len(bad) == 2 {
		if cause := bad[0].Header.Get(consumer.HeaderCause); cause != "card declined:  no funds" {
			t.Errorf("the cause header is %q, want the handler's error on one line", cause)
		}
		if bad[0].Header.Get("Tenant") != "t1" || bad[0].Header.Get("Idempotency-Key") != "bad" {
			t.Errorf("the dead letter lost the original's headers: %v", bad[0].Header)
		}
		if bad[1].Header.Get(idemnats.HeaderMsgID) != "bad-copy" || bad[1].Header.Get(jetstream.MsgIDHeader) == "bad-copy" {
			t.Errorf("the copy's Nats-Msg-Id should move to %s: %v", idemnats.HeaderMsgID, bad[1].Header)
		}
	}
	if cause := got[string(consumer.ReasonMissingKey)]; len(cause) == 1 && cause[0].Header.Get(consumer.HeaderCause) != consumer.ErrNoKey.Error() {
		t.Errorf("missing-key cause %q", cause[0].Header.Get(consumer.HeaderCause))
	}
	if cause := got[string(consumer.ReasonTooManyAttempts)]; len(cause) == 1 && cause[0].Header.Get(consumer.HeaderCause) != idem.ErrTooManyAttempts.Error() {
		t.Errorf("too-many-attempts cause %q", cause[0].Header.Get(consumer.HeaderCause))
	}
}

// With WithUnkeyedUnguarded a message without a key is handled without
// idempotency and acked; without it, it is poison (TestPoison).
func TestUnkeyedUnguarded(t *testing.T) {
	t.Parallel()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{})
	var calls counter
	run(t, newGuard(t, memStore(t), idem.Config{}), cons, func(ctx context.Context, msg jetstream.Msg) error {
		if _, ok := idem.TokenFrom(ctx); ok {
			t.Error("an unkeyed message ran under a lease token")
		}
		calls.Add(1)
		return nil
	}, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithUnkeyedUnguarded())
	publish(t, js, subject(s, "x"), "a")
	publish(t, js, subject(s, "x"), "a")
	waitFor(t, 10*time.Second, "both messages acked", func() bool { return drained(t, cons) })
	if n := calls.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2: unkeyed messages are not deduplicated", n)
	}
}

// The headers JetStream acts on when a message is published (a condition
// on the stream's last sequence, a rollup, a TTL) are kept by a dead
// letter under renamed headers, in whatever case they came, never live: a
// publisher would otherwise have the dead letter refused, purge the
// dead-letter stream or expire its own dead letter.
func TestDeadLetterKeepsNoSteeringHeader(t *testing.T) {
	t.Parallel()
	_, js := connect(t, natsURL)
	s := newStream(t, js, jetstream.StreamConfig{AllowRollup: true, AllowMsgTTL: true})
	dlq := newStream(t, js, jetstream.StreamConfig{AllowRollup: true, AllowMsgTTL: true})
	cons := newConsumer(t, s, jetstream.ConsumerConfig{})
	g := newGuard(t, memStore(t), idem.Config{})
	run(t, g, cons, func(context.Context, jetstream.Msg) error { return idem.Permanent(errors.New("card declined")) },
		idemnats.WithSharedScope(), idemnats.WithKeyHeader("Idempotency-Key"), idemnats.WithDeadLetter(js, subject(dlq, "dead")))
	in := subject(s, "payments")
	publish(t, js, in, "first", "Idempotency-Key", "first")
	waitFor(t, 20*time.Second, "the first dead letter", func() bool { return streamMsgs(t, dlq) == 1 })
	// Values the consumer's stream took: the dead letter's would refuse
	// them, or act on them.
	steering := []string{"Nats-Expected-Stream", s.CachedInfo().Config.Name, "nats-expected-last-sequence", "1", "NATS-TTL", "1h", "nats-rollup", "all"}
	publish(t, js, in, "second", append([]string{"Idempotency-Key", "second"}, steering...)...)
	waitFor(t, 20*time.Second, "both dead letters", func() bool { return drained(t, cons) && streamMsgs(t, dlq) == 2 })
	m := deadLetters(t, dlq)[1]
	for i := 0; i < len(steering); i += 2 {
		name := steering[i]
		if v := m.Header.Values(name); len(v) != 0 {
			t.Errorf("the dead letter carries %s %v live", name, v)
		}
		if v := m.Header.Get(consumer.HeaderOriginalPrefix + name); v != steering[i+1] {
			t.Errorf("the dead letter's %s = %q, want the original's %q", consumer.HeaderOriginalPrefix+name, v, steering[i+1])
		}
	}
}
