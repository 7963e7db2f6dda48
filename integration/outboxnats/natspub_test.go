package outboxnats_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/natspub"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// natsServer is the shared server of this machine.
var (
	natsServer = testenv.Server{Name: "NATS", Env: "IDEM_NATS_URL", Default: nats.DefaultURL}
	natsURL    = natsServer.Addr()
)

// connect returns a JetStream over a connection to url as natspub wants
// it (no reconnect buffer), closed when t ends. It skips or fails t when
// the server cannot be reached.
func connect(t testing.TB, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	opts = append([]nats.Option{nats.ReconnectBufSize(-1), nats.MaxReconnects(-1), nats.Timeout(2 * time.Second)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		natsServer.Unreachable(t, url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// newStream creates a stream of t's own on js, over subjects <prefix>.>,
// deleted when t ends, and returns its name and subject prefix.
func newStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) (string, string) {
	t.Helper()
	run := strings.ToLower(outboxtest.NewRunID())
	cfg.Name = "outboxtest_" + run
	cfg.Subjects = []string{"outboxtest." + run + ".>"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, cfg.Name); err != nil && !t.Failed() {
			t.Errorf("delete stream: %v", err)
		}
	})
	return cfg.Name, "outboxtest." + run
}

// subscribe reads subject of stream from the start, in order, onto the
// channel returned, until t ends.
func subscribe(t testing.TB, js jetstream.JetStream, stream, subject string) <-chan outboxtest.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	got := make(chan outboxtest.Received, 10000)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		h := map[string]string{}
		for name, vs := range m.Headers() {
			h[name] = vs[0]
		}
		got <- outboxtest.Received{ID: m.Headers().Get(jetstream.MsgIDHeader), Headers: h, Payload: m.Data()}
	})
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	t.Cleanup(cc.Stop)
	return got
}

func TestPublisher(t *testing.T) {
	outboxtest.TestPublisher(t, func(t *testing.T) outboxtest.Broker {
		js := connect(t, natsURL)
		stream, prefix := newStream(t, js, jetstream.StreamConfig{})
		pub, err := natspub.New(js)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		return outboxtest.Broker{
			Publisher: pub,
			Destination: func(t *testing.T) (string, <-chan outboxtest.Received) {
				n++
				subject := prefix + ".d" + strconv.Itoa(n)
				return subject, subscribe(t, js, stream, subject)
			},
			Poisons: []outboxtest.Poison{
				{Name: "SubjectWithASpace", Message: subjectPoison(" x"), Err: "invalid subject"},
				{Name: "WildcardSubject", Message: subjectPoison(".*"), Err: "invalid subject"},
				{Name: "EmptyToken", Message: subjectPoison("..x"), Err: "invalid subject"},
			},
		}
	})
}

// subjectPoison returns a message to a subject, invalid, made of the
// test's own and suffix.
func subjectPoison(suffix string) func(dest string) outbox.Message {
	return func(dest string) outbox.Message {
		return outbox.Message{Destination: dest + suffix, Payload: []byte("poison")}
	}
}

func TestNewRequiresNoReconnectBuffer(t *testing.T) {
	nc, err := nats.Connect(natsURL) // the default: an 8MB reconnect buffer
	if err != nil {
		natsServer.Unreachable(t, natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natspub.New(js); err == nil || !strings.Contains(err.Error(), "ReconnectBufSize(-1)") {
		t.Errorf("New over a buffering connection = %v, want an error naming nats.ReconnectBufSize(-1)", err)
	}
	if _, err := natspub.New(nil); err == nil {
		t.Error("New(nil) = nil error")
	}
}

// TestTheStreamDropsARepublishedMessage: a message published again (as a
// relay does after a crash) carries the same Nats-Msg-Id, and the stream's
// duplicate window keeps one copy.
func TestTheStreamDropsARepublishedMessage(t *testing.T) {
	js := connect(t, natsURL)
	stream, prefix := newStream(t, js, jetstream.StreamConfig{})
	pub, err := natspub.New(js)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer cancel()
	msg := outbox.Message{ID: "charge-" + outboxtest.NewRunID(), Destination: prefix + ".charges", Payload: []byte("42")}
	for range 2 {
		if err := pub.Publish(ctx, []outbox.Message{msg}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("the stream holds %d messages after the same one was published twice, want 1", n)
	}
}

// TestAMessageWithoutAStreamFails: a subject no stream takes fails, so the
// relay keeps the message, and as a refusal of the server (not as
// unavailable), so the relay counts the attempt.
func TestAMessageWithoutAStreamFails(t *testing.T) {
	js := connect(t, natsURL)
	pub, err := natspub.New(js)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer cancel()
	err = pub.Publish(ctx, []outbox.Message{{ID: "x", Destination: "outboxtest.nostream." + outboxtest.NewRunID(), Key: "k"},
		{ID: "y", Destination: "outboxtest.nostream.other", Key: "k"}})
	pe, ok := err.(*outbox.PublishError)
	if !ok || pe.Errs[0] == nil || pe.Errs[1] == nil {
		t.Fatalf("Publish to a subject without a stream = %v, want both messages failed", err)
	}
	if outbox.IsUnavailable(pe.Errs[0]) || outbox.IsPermanent(pe.Errs[0]) {
		t.Errorf("Publish to a subject without a stream = %v, want a refusal, neither unavailable nor permanent", pe.Errs[0])
	}
}

// TestAMessageOverMaxPayloadIsPermanent: a message larger than the
// server's max_payload fails as permanent without holding back the next
// message of the call, and a relay moves its row to the dead rows and
// publishes the others.
func TestAMessageOverMaxPayloadIsPermanent(t *testing.T) {
	js := connect(t, natsURL)
	stream, prefix := newStream(t, js, jetstream.StreamConfig{})
	pub, err := natspub.New(js)
	if err != nil {
		t.Fatal(err)
	}
	max := int(js.Conn().MaxPayload())
	subject := prefix + ".big"
	got := subscribe(t, js, stream, subject)
	run := outboxtest.NewRunID()
	big := outbox.Message{ID: "big-" + run, Destination: subject, Key: "a", Payload: make([]byte, max+1)}
	small := outbox.Message{ID: "small-" + run, Destination: subject, Key: "b", Payload: []byte("s")}
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer cancel()
	err = pub.Publish(ctx, []outbox.Message{big, small})
	pe, ok := err.(*outbox.PublishError)
	if !ok || !outbox.IsPermanent(pe.Errs[0]) || !errors.Is(pe.Errs[0], nats.ErrMaxPayload) || pe.Errs[1] != nil {
		t.Fatalf("Publish(over max_payload, small) = %v, want the first failed as permanent, the second published", err)
	}
	if r := <-got; r.ID != small.ID {
		t.Fatalf("received %q, want %q", r.ID, small.ID)
	}

	pool := pgstoretest.Pool(t, 4)
	table := outboxtest.Table(t, pool)
	msgs, want := outboxtest.Messages(20, 3, subject)
	poison := big
	poison.ID, poison.Key = "relayed-big-"+run, "key-1"
	msgs = append(msgs[:10], append([]outbox.Message{poison}, msgs[10:]...)...)
	ob, err := outbox.New(outbox.Config{Table: table, MaxPayload: 2 * max})
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
	ids := make([]string, 0, 20)
	for range 20 {
		select {
		case r := <-got:
			ids = append(ids, r.ID)
		case <-ctx.Done():
			t.Fatalf("received %d of the 20 good messages", len(ids))
		}
	}
	outboxtest.CheckOrder(t, want, ids)
	outboxtest.AwaitPending(t, pool, table, 0)
	dead, err := outbox.Dead(ctx, pool, table, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Message.ID != poison.ID || dead[0].Attempts != 1 || !strings.Contains(dead[0].LastError, "maximum payload") {
		t.Errorf("dead rows %+v, want %s after 1 attempt, with its error", dead, poison.ID)
	}
}
