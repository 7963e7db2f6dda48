package outbox

import (
	"bytes"
	"errors"
	"maps"
	"testing"
)

// FuzzDecodeHeaders: any bytes decode to headers or to ErrCorruptHeaders,
// never a panic; what decodes encodes back to the same bytes, and what is
// encoded decodes back to the same headers.
func FuzzDecodeHeaders(f *testing.F) {
	f.Add([]byte(nil))
	f.Add(encodeHeaders(map[string]string{"a": "1"}))
	f.Add(encodeHeaders(map[string]string{"Content-Type": "application/json", "Trace": "", "x": "\x00\xff"}))
	f.Add([]byte{1, 2, 1, 'b', 0, 1, 'a', 0}) // unsorted
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeaders(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptHeaders) {
				t.Fatalf("DecodeHeaders(%x) = %v, want ErrCorruptHeaders", b, err)
			}
			return
		}
		if got := encodeHeaders(h); !bytes.Equal(got, b) {
			t.Fatalf("DecodeHeaders(%x) = %q, which encodes as %x", b, h, got)
		}
		again, err := DecodeHeaders(encodeHeaders(h))
		if err != nil || !maps.Equal(again, h) {
			t.Fatalf("round trip of %q: %q, %v", h, again, err)
		}
	})
}
