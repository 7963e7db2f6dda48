package idem_test

import (
	"errors"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// FuzzDecodeFailure: any stored bytes decode to a permanent error without a
// panic, and an encoded message decodes to itself.
func FuzzDecodeFailure(f *testing.F) {
	f.Add([]byte(nil))
	f.Add([]byte("Pcard declined"))
	f.Add(storage.TooManyAttemptsCause())
	f.Add([]byte{0xff, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		err := idem.DecodeFailure(b)
		if !idem.IsPermanent(err) {
			t.Fatalf("DecodeFailure(%q) = %v, not permanent", b, err)
		}
		msg := string(b)
		if got := idem.DecodeFailure(idem.EncodeFailure(errors.New(msg))); got.Error() != msg {
			t.Fatalf("round trip of %q gave %q", msg, got.Error())
		}
	})
}

// FuzzStoreKey: two (namespace, key) pairs share a store key only when
// they are the same pair.
func FuzzStoreKey(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("", "\x01a", "\x01", "a")
	f.Add("ns", "", "n", "s")
	f.Fuzz(func(t *testing.T, ns1, k1, ns2, k2 string) {
		same := storage.StoreKey(ns1, k1) == storage.StoreKey(ns2, k2)
		if same != (ns1 == ns2 && k1 == k2) {
			t.Fatalf("StoreKey(%q, %q) == StoreKey(%q, %q) is %v", ns1, k1, ns2, k2, same)
		}
	})
}

func TestEncodeFailureKeepsTooManyAttempts(t *testing.T) {
	err := idem.DecodeFailure(idem.EncodeFailure(idem.Permanent(idem.ErrTooManyAttempts)))
	if !errors.Is(err, idem.ErrTooManyAttempts) {
		t.Fatalf("round trip of ErrTooManyAttempts: %v", err)
	}
}
