package idemnats

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestEventKindString(t *testing.T) {
	for k, want := range map[EventKind]string{EventAcked: "acked", EventDelayed: "delayed", EventRequeued: "requeued",
		EventDeadLettered: "dead_lettered", EventInProgress: "in_progress", EventDiscarded: "discarded",
		0: "EventKind(0)", 9: "EventKind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("EventKind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

// The errors of a dead letter's publish, as nats.go returns them: an
// answer that says no is a refusal, counted toward giving up; an answer
// that says too large is stripped first; no answer is an outage, never
// given up on. The integration tests (deadletter_test.go) meet each on a
// real server.
func TestRefusalOf(t *testing.T) {
	apiErr := func(code jetstream.ErrorCode, desc string) error {
		// How publishMsg wraps the ack's error.
		return fmt.Errorf("nats: %w", &jetstream.APIError{Code: 400, ErrorCode: code, Description: desc})
	}
	for _, tc := range []struct {
		name string
		err  error
		want refusal
	}{
		{"no stream takes the subject", jetstream.ErrNoStreamResponse, refused},
		{"no responders", nats.ErrNoResponders, refused},
		{"stream full (discard new)", apiErr(10077, "maximum messages exceeded"), refused},
		{"account limits", apiErr(10027, "resource limits exceeded for account"), refused},
		{"stream max_msg_size", apiErr(jetstream.JSErrCodeStreamMessageExceedsMaximum, "message size exceeds maximum allowed"), tooLarge},
		{"connection max_payload", nats.ErrMaxPayload, tooLarge},
		{"headers over 64 KiB", apiErr(errCodeHeaderTooLarge, "header size exceeds maximum allowed of 64k"), tooLarge},
		{"permissions", fmt.Errorf("%w: publish to dlq", nats.ErrPermissionViolation), refused},
		{"bad subject", nats.ErrBadSubject, refused},
		{"timeout", context.DeadlineExceeded, outage},
		{"nats timeout", nats.ErrTimeout, outage},
		{"connection closed", nats.ErrConnectionClosed, outage},
		{"reconnecting", nats.ErrReconnectBufExceeded, outage},
		{"stopping", context.Canceled, outage},
		{"something else", errors.New("EOF"), outage},
	} {
		if got := refusalOf(tc.err); got != tc.want {
			t.Errorf("%s: refusalOf(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}
