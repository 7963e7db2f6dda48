package idemnats

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
)

func TestVerdictOf(t *testing.T) {
	declined := idem.Permanent(errors.New("card declined"))
	cases := []struct {
		name string
		res  idem.Result
		err  error
		want verdict
	}{
		{"stored", idem.Result{}, nil, verdict{action: actAck}},
		{"duplicate", idem.Result{Replayed: true}, nil, verdict{action: actAck}},
		{"busy", idem.Result{}, fmt.Errorf("%w (key %q)", idem.ErrInProgress, "k"), verdict{action: actRetry, delay: 0, busy: true}},
		{"retryable handler error", idem.Result{}, errors.New("upstream timeout"), verdict{action: actRetry, delay: 2 * time.Second}},
		{"panic", idem.Result{}, &PanicError{Value: "boom"}, verdict{action: actRetry, delay: 2 * time.Second}},
		{"stopping", idem.Result{}, errStopping, verdict{action: actRetry, delay: 2 * time.Second}},
		{"claim failed", idem.Result{}, fmt.Errorf("%w: claim: refused", idem.ErrStoreUnavailable), verdict{action: actRetry, delay: 2 * time.Second}},
		{"done, lease lost", idem.Result{}, fmt.Errorf("idem: complete: %w", idem.ErrLeaseLost), verdict{action: actRetry, delay: 2 * time.Second}},
		{"permanent", idem.Result{}, declined, verdict{action: actDeadLetter, reason: ReasonPermanent}},
		{"replayed permanent", idem.Result{Replayed: true}, &idem.PermanentError{Err: errors.New("card declined"), Replayed: true}, verdict{action: actDeadLetter, reason: ReasonPermanent}},
		{"too many attempts", idem.Result{Replayed: true}, &idem.PermanentError{Err: idem.ErrTooManyAttempts, Replayed: true}, verdict{action: actDeadLetter, reason: ReasonTooManyAttempts}},
		{"key reused", idem.Result{}, fmt.Errorf("%w (key %q)", idem.ErrKeyReused, "k"), verdict{action: actDeadLetter, reason: ReasonKeyReused}},
		{"key too long", idem.Result{}, fmt.Errorf("%w: 300 bytes", idem.ErrInvalidKey), verdict{action: actDeadLetter, reason: ReasonInvalidKey}},
	}
	// A zero busy delay is this consumer's own setting (Nak at once), not
	// the shared policy's default.
	o := options{busyDelay: 0, retryDelay: 2 * time.Second}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := o.verdictOf(tc.res, tc.err)
			if got.action != tc.want.action || got.delay != tc.want.delay || got.busy != tc.want.busy || got.reason != tc.want.reason {
				t.Fatalf("verdictOf(%v) = %v %v busy=%v %q, want %v %v busy=%v %q", tc.err, got.action, got.delay, got.busy, got.reason,
					tc.want.action, tc.want.delay, tc.want.busy, tc.want.reason)
			}
			if tc.want.action != actAck && got.cause != tc.err {
				t.Fatalf("verdictOf kept cause %v, want %v", got.cause, tc.err)
			}
		})
	}
}

func TestEventKindString(t *testing.T) {
	for k, want := range map[EventKind]string{EventAcked: "acked", EventDelayed: "delayed", EventRequeued: "requeued",
		EventDeadLettered: "dead_lettered", EventInProgress: "in_progress", 0: "EventKind(0)", 9: "EventKind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("EventKind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

// headerMsg is a message with headers only.
type headerMsg struct {
	jetstream.Msg
	h nats.Header
}

func (m headerMsg) Headers() nats.Header { return m.h }

// FuzzHeaders feeds the header handling arbitrary values: a key header
// never panics, comes back as sent or is refused with a *KeyError, and a cause always becomes a
// header value NATS can carry (one line, valid UTF-8, bounded).
func FuzzHeaders(f *testing.F) {
	f.Add("order-1", "card declined")
	f.Add("", "line one\r\nline two")
	f.Add("\x00\xff", strings.Repeat("é", 700))
	f.Add("a\nb", "\x1b[31mred\x7f")
	f.Fuzz(func(t *testing.T, key, cause string) {
		for n := 1; n <= 2; n++ {
			h := nats.Header{}
			for range n {
				h.Add("Idempotency-Key", key)
			}
			got, err := HeaderKey("Idempotency-Key")(headerMsg{h: h})
			switch {
			case n == 1 && key == "" && err == nil:
				t.Fatalf("an empty header: no error")
			case n == 1 && key != "" && (err != nil || got != key):
				t.Fatalf("one header %q: got %q, %v", key, got, err)
			case n == 2 && err == nil:
				t.Fatalf("two headers: no error")
			}
			if err != nil {
				if _, ok := errors.AsType[*KeyError](err); !ok || got != "" {
					t.Fatalf("header %q sent %d times: %q, %v; want a *KeyError", key, n, got, err)
				}
			}
		}
		line := oneLine(errors.New(cause))
		if len(line) > maxCauseLen || !utf8.ValidString(line) || strings.ContainsAny(line, "\r\n") {
			t.Fatalf("oneLine(%q) = %q: not a bounded single line of UTF-8", cause, line)
		}
		if len(cause) <= maxCauseLen/3 && utf8.ValidString(cause) && !strings.ContainsFunc(cause, func(r rune) bool { return r < ' ' }) && line != cause {
			t.Fatalf("oneLine(%q) = %q: changed a short printable cause", cause, line)
		}
	})
}
