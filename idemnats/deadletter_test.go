package idemnats_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemnats"
)

// logRecords is a slog handler that keeps every record, for tests that
// check what the consumer logged.
type logRecords struct {
	mu  sync.Mutex
	all []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.all = append(l.all, r.Clone())
	l.mu.Unlock()
	return nil
}

// count returns how many records at level say what.
func (l *logRecords) count(level slog.Level, what string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.all {
		if r.Level == level && strings.Contains(r.Message, what) {
			n++
		}
	}
	return n
}

// attrs returns the attributes of the first record at level that says
// what, as text.
func (l *logRecords) attrs(level slog.Level, what string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.all {
		if r.Level == level && strings.Contains(r.Message, what) {
			out := map[string]string{}
			r.Attrs(func(a slog.Attr) bool { out[a.Key] = a.Value.String(); return true })
			return out
		}
	}
	return nil
}

// declined is a handler that fails permanently for the key "poison".
func declined(calls *counter) idemnats.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		if msg.Headers().Get(jetstream.MsgIDHeader) == "poison" {
			calls.Add(1)
			return idem.Permanent(errors.New("card declined"))
		}
		return nil
	}
}

// A dead letter to a subject no stream takes any more (the dead-letter
// stream deleted while the consumer runs) is refused: every refusal is
// reported (EventDeadLetterFailed, Refused) and logged at error level; it
// is tried MaxAttempts times, then the consumer gives up on it, loudly (an
// error log that says where the message is, EventDiscarded with the
// refusal), and terminates the message, so that nothing waits on it for
// good.
func TestDeadLetterRefusedIsGivenUp(t *testing.T) {
	t.Parallel()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{})
	dlq := newStream(t, js, jetstream.StreamConfig{})
	var ev events
	var calls counter
	logs := &logRecords{}
	run(t, newGuard(t, memStore(t), idem.Config{}), cons, declined(&calls), idemnats.WithSharedScope(),
		idemnats.WithDeadLetter(js, subject(dlq, "dead")), idemnats.WithMaxAttempts(3),
		idemnats.WithRetryBackoff(10*time.Millisecond, 20*time.Millisecond),
		idemnats.WithObserver(ev.Observe), idemnats.WithLogger(slog.New(logs)))
	publish(t, js, subject(s, "orders"), "first", jetstream.MsgIDHeader, "first")
	waitFor(t, 30*time.Second, "the first message settled", func() bool { return drained(t, cons) })
	if err := js.DeleteStream(context.Background(), dlq.CachedInfo().Config.Name); err != nil {
		t.Fatal(err)
	}
	ack := publish(t, js, subject(s, "orders"), "{", jetstream.MsgIDHeader, "poison")
	publish(t, js, subject(s, "orders"), "good", jetstream.MsgIDHeader, "good")
	discarded := func(e idemnats.Event) bool {
		return e.Kind == idemnats.EventDiscarded && e.Reason == consumer.ReasonPermanent && errors.Is(e.BrokerErr, jetstream.ErrNoStreamResponse)
	}
	waitFor(t, 30*time.Second, "the poison given up on and every message settled", func() bool {
		return ev.Count(discarded) == 1 && drained(t, cons)
	})
	if n := logs.count(slog.LevelError, "refused the dead letter; trying again"); n != 2 {
		t.Errorf("%d refusals tried again, want 2 (3 tries in all)", n)
	}
	failed := func(e idemnats.Event) bool {
		a := e.Activity()
		return e.Kind == idemnats.EventDeadLetterFailed && e.Refused && e.Key == "poison" && errors.Is(e.BrokerErr, jetstream.ErrNoStreamResponse) &&
			a.Kind == consumer.ActivityDeadLetterFailed && a.Refused
	}
	if n := ev.Count(failed); n != 3 {
		t.Errorf("%d EventDeadLetterFailed of the poison, refused, want 3", n)
	}
	attrs := logs.attrs(slog.LevelError, "refused the dead letter 3 times")
	if attrs == nil {
		t.Fatal("no error log of the dead letter given up on")
	}
	if attrs["stream"] != ack.Stream || attrs["sequence"] != strconv.FormatUint(ack.Sequence, 10) {
		t.Errorf("the error log says stream %q sequence %q, want the poison's %s %d", attrs["stream"], attrs["sequence"], ack.Stream, ack.Sequence)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
	if n := ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventAcked && e.Key == "good" }); n != 1 {
		t.Errorf("the good message acked %d times, want 1", n)
	}
}

// A dead-letter subject no stream takes is found before anything is
// consumed: Run returns a *consumer.DeadLetterMissingError that names it,
// and the message waits in its stream.
func TestDeadLetterMissingAtStart(t *testing.T) {
	t.Parallel()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{})
	var calls counter
	dead := "IDEMTEST_NO_STREAM_" + random(6)
	publish(t, js, subject(s, "orders"), "{", jetstream.MsgIDHeader, "poison")
	c, err := idemnats.New(newGuard(t, memStore(t), idem.Config{}), cons, declined(&calls), idemnats.WithSharedScope(),
		idemnats.WithDeadLetter(js, dead))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Run(ctx)
	if missing, ok := errors.AsType[*consumer.DeadLetterMissingError](err); !ok || !strings.Contains(missing.Destination, dead) {
		t.Fatalf("Run = %v, want a *consumer.DeadLetterMissingError naming the subject", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 0 || info.NumPending != 1 || info.Delivered.Consumer != 0 {
		t.Errorf("the consumer consumed (%d runs, %d pending, %d delivered), want nothing", calls.Load(), info.NumPending, info.Delivered.Consumer)
	}
}

// A dead letter that cannot reach its server is an outage, not a refusal:
// the message is held (not terminated, not given up on) and the publish
// tried again, well past MaxAttempts, until the server is back; then the
// dead letter is stored and the message terminated.
func TestDeadLetterUnreachableIsHeld(t *testing.T) {
	t.Parallel()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{})
	// The dead letters go to a server of the test's own, which it kills. No
	// reconnect buffer: a publish meanwhile fails at once, rather than after
	// its timeout.
	srv := startNATSServer(t)
	_, djs := connect(t, srv.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectJitter(0, 0), nats.ReconnectBufSize(-1))
	dlq := newStream(t, djs, jetstream.StreamConfig{Storage: jetstream.FileStorage})
	var ev events
	var calls counter
	logs := &logRecords{}
	run(t, newGuard(t, memStore(t), idem.Config{}), cons, declined(&calls), idemnats.WithSharedScope(),
		idemnats.WithDeadLetter(djs, subject(dlq, "dead")), idemnats.WithMaxAttempts(2),
		idemnats.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond),
		idemnats.WithObserver(ev.Observe), idemnats.WithLogger(slog.New(logs)))
	srv.kill()
	publish(t, js, subject(s, "orders"), "{", jetstream.MsgIDHeader, "poison")
	discarded := func(e idemnats.Event) bool { return e.Kind == idemnats.EventDiscarded }
	waitFor(t, 30*time.Second, "the dead letter tried 5 times", func() bool {
		if n := ev.Count(discarded); n != 0 {
			t.Fatalf("an unreachable dead-letter server made the consumer give up on %d messages", n)
		}
		return logs.count(slog.LevelWarn, "did not reach the broker") >= 5
	})
	if drained(t, cons) {
		t.Fatal("the message left the stream without its dead letter")
	}
	srv.start()
	waitFor(t, 30*time.Second, "the dead letter stored and the message terminated", func() bool {
		return ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventDeadLettered }) == 1 && drained(t, cons)
	})
	if n := streamMsgs(t, dlq); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// A stream refuses a message larger than its max_msg_size: the dead
// letter is sent again without the original's data and headers, recorded
// by size and SHA-256. One that even so is too large is refused, and given
// up on after MaxAttempts.
func TestDeadLetterTooLargeForItsStream(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("x"), 16<<10)
	for _, tc := range []struct {
		name    string
		maxSize int32
		stored  bool
	}{
		{"stripped fits", 8 << 10, true},
		{"too large even stripped", 256, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			js, s, cons := fixture(t, jetstream.ConsumerConfig{})
			dlq := newStream(t, js, jetstream.StreamConfig{MaxMsgSize: tc.maxSize})
			var ev events
			var calls counter
			run(t, newGuard(t, memStore(t), idem.Config{}), cons, declined(&calls), idemnats.WithSharedScope(),
				idemnats.WithDeadLetter(js, subject(dlq, "dead")), idemnats.WithMaxAttempts(2),
				idemnats.WithRetryBackoff(10*time.Millisecond, 20*time.Millisecond), idemnats.WithObserver(ev.Observe))
			publish(t, js, subject(s, "orders"), string(body), jetstream.MsgIDHeader, "poison", "Tenant", "t1")
			settled := func(e idemnats.Event) bool {
				return e.Kind == idemnats.EventDeadLettered || e.Kind == idemnats.EventDiscarded
			}
			waitFor(t, 30*time.Second, "the poison settled", func() bool { return ev.Count(settled) == 1 && drained(t, cons) })
			if !tc.stored {
				tooLarge := func(e idemnats.Event) bool {
					apiErr, ok := errors.AsType[*jetstream.APIError](e.BrokerErr)
					return e.Kind == idemnats.EventDiscarded && ok && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
				}
				if ev.Count(tooLarge) != 1 || streamMsgs(t, dlq) != 0 {
					t.Fatalf("a dead letter too large even stripped: not given up on with the stream's refusal (%d dead letters)", streamMsgs(t, dlq))
				}
				return
			}
			dls := deadLetters(t, dlq)
			if len(dls) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dls))
			}
			dl := dls[0]
			if len(dl.Data) != 0 || dl.Header.Get(consumer.HeaderBodySize) != strconv.Itoa(len(body)) || len(dl.Header.Get(consumer.HeaderBodySHA256)) != 64 {
				t.Errorf("the stripped dead letter has %d bytes of data, body size %q, SHA-256 %q", len(dl.Data),
					dl.Header.Get(consumer.HeaderBodySize), dl.Header.Get(consumer.HeaderBodySHA256))
			}
			if dl.Header.Get("Tenant") != "" || dl.Header.Get(consumer.HeaderCutHeaders) != "Tenant" {
				t.Errorf("the stripped dead letter kept Tenant %q; cut headers %q, want Tenant", dl.Header.Get("Tenant"), dl.Header.Get(consumer.HeaderCutHeaders))
			}
			if dl.Header.Get(consumer.HeaderReason) != string(consumer.ReasonPermanent) || dl.Header.Get(consumer.HeaderKey) != "poison" {
				t.Errorf("the stripped dead letter lost its reason or key: %v", dl.Header)
			}
		})
	}
}

// The dead letter fits the max_payload of its own connection's server,
// which may be smaller than the one the message came from: a message of
// 200 KiB from the shared server (1 MiB) goes to a server that takes
// 64 KiB without its data, its other headers kept.
func TestDeadLetterFitsMaxPayload(t *testing.T) {
	t.Parallel()
	js, s, cons := fixture(t, jetstream.ConsumerConfig{})
	conf := filepath.Join(t.TempDir(), "small.conf")
	if err := os.WriteFile(conf, []byte("max_payload: 65536\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startNATSServer(t, "-c", conf)
	dnc, djs := connect(t, srv.url())
	if n := dnc.MaxPayload(); n != 65536 {
		t.Fatalf("the small server's max_payload is %d, want 65536", n)
	}
	dlq := newStream(t, djs, jetstream.StreamConfig{})
	var ev events
	var calls counter
	run(t, newGuard(t, memStore(t), idem.Config{}), cons, declined(&calls), idemnats.WithSharedScope(),
		idemnats.WithDeadLetter(djs, subject(dlq, "dead")), idemnats.WithObserver(ev.Observe))
	body := bytes.Repeat([]byte("x"), 200<<10)
	publish(t, js, subject(s, "orders"), string(body), jetstream.MsgIDHeader, "poison", "Tenant", "t1")
	waitFor(t, 30*time.Second, "the poison dead-lettered", func() bool {
		return ev.Count(func(e idemnats.Event) bool { return e.Kind == idemnats.EventDeadLettered }) == 1 && drained(t, cons)
	})
	dls := deadLetters(t, dlq)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	if len(dl.Data) != 0 || dl.Header.Get(consumer.HeaderBodySize) != strconv.Itoa(len(body)) {
		t.Errorf("the dead letter has %d bytes of data and body size %q, want none and %d", len(dl.Data), dl.Header.Get(consumer.HeaderBodySize), len(body))
	}
	// Fit to the small server's limit leaves the small headers in; a letter
	// fit to the shared server's, refused, and stripped would not have.
	if dl.Header.Get("Tenant") != "t1" || dl.Header.Get(consumer.HeaderCutHeaders) != "" {
		t.Errorf("the dead letter's Tenant is %q, cut headers %q: not fit to its server's max_payload", dl.Header.Get("Tenant"), dl.Header.Get(consumer.HeaderCutHeaders))
	}
}
