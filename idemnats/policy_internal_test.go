package idemnats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/idemgo/idem"
)

func TestJudge(t *testing.T) {
	const busy, retry = time.Second, 2 * time.Second
	handlerErr := errors.New("upstream timeout")
	declined := idem.Permanent(errors.New("card declined"))
	cases := []struct {
		name string
		err  error
		want verdict
	}{
		{"stored or duplicate", nil, verdict{action: ActionAck}},
		{"busy", fmt.Errorf("%w (key %q)", idem.ErrInProgress, "k"), verdict{action: ActionRetry, delay: busy}},
		{"retryable handler error", handlerErr, verdict{action: ActionRetry, delay: retry}},
		{"panic", &PanicError{Value: "boom"}, verdict{action: ActionRetry, delay: retry}},
		{"claim failed", fmt.Errorf("%w: claim: refused", idem.ErrStoreUnavailable), verdict{action: ActionRetry, delay: retry}},
		{"stopping", errStopping, verdict{action: ActionRetry, delay: retry}},
		{"context cancelled", context.Canceled, verdict{action: ActionRetry, delay: retry}},
		{"permanent", declined, verdict{action: ActionDeadLetter, reason: ReasonPermanent}},
		{"replayed permanent", &idem.PermanentError{Err: errors.New("card declined"), Replayed: true}, verdict{action: ActionDeadLetter, reason: ReasonPermanent}},
		{"too many attempts", &idem.PermanentError{Err: idem.ErrTooManyAttempts, Replayed: true}, verdict{action: ActionDeadLetter, reason: ReasonTooManyAttempts}},
		{"key reused", fmt.Errorf("%w (key %q)", idem.ErrKeyReused, "k"), verdict{action: ActionDeadLetter, reason: ReasonKeyReused}},
		{"key too long", fmt.Errorf("%w: 300 bytes", idem.ErrInvalidKey), verdict{action: ActionDeadLetter, reason: ReasonInvalidKey}},
		// An outcome that was not stored is never acked nor dead-lettered.
		{"permanent, Fail not stored", errors.Join(declined, fmt.Errorf("%w: fail: timeout", idem.ErrStoreUnavailable)), verdict{action: ActionRetry, delay: retry}},
		{"permanent, lease lost", errors.Join(declined, fmt.Errorf("idem: fail: %w", idem.ErrLeaseLost)), verdict{action: ActionRetry, delay: retry}},
		{"done, lease lost", fmt.Errorf("idem: complete: %w", idem.ErrLeaseLost), verdict{action: ActionRetry, delay: retry}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := judge(tc.err, busy, retry)
			if got.action != tc.want.action || got.delay != tc.want.delay || got.reason != tc.want.reason {
				t.Fatalf("judge(%v) = %v %v %q, want %v %v %q", tc.err, got.action, got.delay, got.reason, tc.want.action, tc.want.delay, tc.want.reason)
			}
			if got.cause != tc.err {
				t.Fatalf("judge kept cause %v, want %v", got.cause, tc.err)
			}
		})
	}
}

func TestActionString(t *testing.T) {
	for a, want := range map[Action]string{ActionAck: "ack", ActionRetry: "retry", ActionDeadLetter: "dead_letter", ActionInProgress: "in_progress", 0: "Action(0)", 9: "Action(9)"} {
		if got := a.String(); got != want {
			t.Errorf("Action(%d).String() = %q, want %q", uint8(a), got, want)
		}
	}
}

// FuzzHeaders feeds the header handling arbitrary values: a key header
// value never panics and comes back as sent, and a cause always becomes a
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
			got, err := keyFromHeader(h, "Idempotency-Key")
			if n == 1 && (err != nil || got != key) {
				t.Fatalf("one header %q: got %q, %v", key, got, err)
			}
			if n == 2 && err == nil {
				t.Fatalf("two headers: no error")
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
