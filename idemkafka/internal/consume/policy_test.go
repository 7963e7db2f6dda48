package consume_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka/internal/consume"
)

func TestDecide(t *testing.T) {
	handlerErr := errors.New("provider timed out")
	for _, tc := range []struct {
		name string
		err  error
		want consume.Action
	}{
		{"value", nil, consume.Ack},
		{"handler error", handlerErr, consume.Retry},
		{"busy", fmt.Errorf("%w (key %q)", idem.ErrInProgress, "k"), consume.Retry},
		{"store down", fmt.Errorf("%w: claim: x", idem.ErrStoreUnavailable), consume.Retry},
		{"lease lost", fmt.Errorf("idem: complete: %w", idem.ErrLeaseLost), consume.Retry},
		{"not run", idem.ErrNotRun, consume.Retry},
		{"cancelled", context.Canceled, consume.Retry},
		{"permanent", idem.Permanent(handlerErr), consume.DeadLetter},
		{"replayed permanent", idem.DecodeFailure(idem.EncodeFailure(handlerErr)), consume.DeadLetter},
		{"too many attempts", idem.DecodeFailure(idem.TooManyAttemptsCause()), consume.DeadLetter},
		{"permanent whose Fail failed", errors.Join(idem.Permanent(handlerErr), fmt.Errorf("%w: fail", idem.ErrStoreUnavailable)), consume.Retry},
		{"key reused", fmt.Errorf("%w (key %q)", idem.ErrKeyReused, "k"), consume.DeadLetter},
		{"invalid key", fmt.Errorf("%w: empty", idem.ErrInvalidKey), consume.DeadLetter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := consume.Decide(tc.err)
			if d.Action != tc.want {
				t.Fatalf("Decide(%v) = %v, want %v", tc.err, d.Action, tc.want)
			}
			if d.Action == consume.DeadLetter && d.Cause != tc.err {
				t.Fatalf("Decide(%v): cause %v, want the error", tc.err, d.Cause)
			}
		})
	}
	for _, tc := range []struct {
		err     error
		unkeyed bool
		want    consume.Action
	}{
		{consume.ErrNoKey, false, consume.DeadLetter},
		{consume.ErrNoKey, true, consume.RunUnguarded},
		{fmt.Errorf("%w: bad json", consume.ErrBadKey), true, consume.DeadLetter},
	} {
		if d := consume.DecideKey(tc.err, tc.unkeyed); d.Action != tc.want {
			t.Fatalf("DecideKey(%v, %v) = %v, want %v", tc.err, tc.unkeyed, d.Action, tc.want)
		}
	}
}
