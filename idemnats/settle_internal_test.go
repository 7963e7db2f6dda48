package idemnats

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemgo/idem/internal/chassis"
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
// answer that says no is a chassis.Refusal, counted toward giving up; an answer
// that says too large is stripped first; no answer is an chassis.Unreached, never
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
		want chassis.Refusal
	}{
		{"no stream takes the subject", jetstream.ErrNoStreamResponse, chassis.Refused},
		{"no responders", nats.ErrNoResponders, chassis.Refused},
		{"stream full (discard new)", apiErr(10077, "maximum messages exceeded"), chassis.Refused},
		{"account limits", apiErr(10027, "resource limits exceeded for account"), chassis.Refused},
		{"stream max_msg_size", apiErr(jetstream.JSErrCodeStreamMessageExceedsMaximum, "message size exceeds maximum allowed"), chassis.RefusedTooLarge},
		{"connection max_payload", nats.ErrMaxPayload, chassis.RefusedTooLarge},
		{"headers over 64 KiB", apiErr(errCodeHeaderTooLarge, "header size exceeds maximum allowed of 64k"), chassis.RefusedTooLarge},
		{"permissions", fmt.Errorf("%w: publish to dlq", nats.ErrPermissionViolation), chassis.Refused},
		{"bad subject", nats.ErrBadSubject, chassis.Refused},
		{"timeout", context.DeadlineExceeded, chassis.Unreached},
		{"nats timeout", nats.ErrTimeout, chassis.Unreached},
		{"connection closed", nats.ErrConnectionClosed, chassis.Unreached},
		{"reconnecting", nats.ErrReconnectBufExceeded, chassis.Unreached},
		{"stopping", context.Canceled, chassis.Unreached},
		{"something else", errors.New("EOF"), chassis.Unreached},
	} {
		if got := refusalOf(tc.err); got != tc.want {
			t.Errorf("%s: refusalOf(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}
