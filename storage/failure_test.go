package storage_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/idemgo/idem/storage"
)

// FuzzDecodeFailure: any stored bytes decode to an error without a panic,
// and an encoded message decodes to itself.
func FuzzDecodeFailure(f *testing.F) {
	f.Add([]byte(nil))
	f.Add([]byte("Pcard declined"))
	f.Add(storage.TooManyAttemptsCause())
	f.Add([]byte{0xff, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := storage.DecodeFailure(b); err == nil {
			t.Fatalf("DecodeFailure(%q) = nil", b)
		}
		msg := string(b)
		if got := storage.DecodeFailure(storage.EncodeFailure(errors.New(msg))); got.Error() != msg {
			t.Fatalf("round trip of %q gave %q", msg, got.Error())
		}
	})
}

func TestEncodeFailureKeepsTooManyAttempts(t *testing.T) {
	wrapped := fmt.Errorf("permanent: %w", storage.ErrTooManyAttempts)
	if got := storage.EncodeFailure(wrapped); string(got) != string(storage.TooManyAttemptsCause()) {
		t.Fatalf("EncodeFailure(%v) = %q, want TooManyAttemptsCause", wrapped, got)
	}
	if err := storage.DecodeFailure(storage.TooManyAttemptsCause()); !errors.Is(err, storage.ErrTooManyAttempts) {
		t.Fatalf("DecodeFailure(TooManyAttemptsCause()) = %v", err)
	}
}

func TestEncodeFailureValueTooLarge(t *testing.T) {
	cause := fmt.Errorf("%w: 9 bytes, the store keeps 8", storage.ErrValueTooLarge)
	err := storage.DecodeFailure(storage.EncodeFailure(cause))
	if !errors.Is(err, storage.ErrValueTooLarge) || err.Error() != cause.Error() {
		t.Fatalf("DecodeFailure(EncodeFailure(%v)) = %v", cause, err)
	}
}

// The short form of a failure keeps its kind where the kind says all, and
// marks any other as a permanent failure whose message was not kept.
func TestShortFailure(t *testing.T) {
	tooLarge := fmt.Errorf("%w: 9 bytes", storage.ErrValueTooLarge)
	for _, tc := range []struct {
		cause error
		want  string
	}{
		{storage.ErrTooManyAttempts, storage.ErrTooManyAttempts.Error()},
		{tooLarge, storage.ErrValueTooLarge.Error()},
		{errors.New("card declined"), "idem: permanent failure (its message was too large to store)"},
	} {
		short := storage.ShortFailure(storage.EncodeFailure(tc.cause))
		if len(short) != 1 || storage.DecodeFailure(short).Error() != tc.want {
			t.Errorf("ShortFailure of %v = %q, decoding to %v; want one byte decoding to %q", tc.cause, short, storage.DecodeFailure(short), tc.want)
		}
	}
}
