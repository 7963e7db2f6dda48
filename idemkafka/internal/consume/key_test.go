package consume_test

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/idemkafka/internal/consume"
)

func TestKeyFromHeaders(t *testing.T) {
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	for _, tc := range []struct {
		name    string
		headers []kgo.RecordHeader
		key     string
		err     error
	}{
		{"none", nil, "", consume.ErrNoKey},
		{"other headers", []kgo.RecordHeader{h("trace", "x")}, "", consume.ErrNoKey},
		{"empty", []kgo.RecordHeader{h("idempotency-key", "")}, "", consume.ErrNoKey},
		{"one", []kgo.RecordHeader{h("trace", "x"), h("idempotency-key", "k1")}, "k1", nil},
		{"twice the same", []kgo.RecordHeader{h("idempotency-key", "k1"), h("idempotency-key", "k1")}, "k1", nil},
		{"twice, different", []kgo.RecordHeader{h("idempotency-key", "k1"), h("idempotency-key", "k2")}, "", consume.ErrBadKey},
		{"case matters", []kgo.RecordHeader{h("Idempotency-Key", "k1")}, "", consume.ErrNoKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := consume.KeyFromHeaders(tc.headers, "idempotency-key")
			if k != tc.key || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("KeyFromHeaders = %q, %v; want %q, %v", k, err, tc.key, tc.err)
			}
		})
	}
}

// FuzzKeyFromHeaders: any headers give a key that is the value of a header
// of that name, or ErrNoKey, or ErrBadKey; never a panic.
func FuzzKeyFromHeaders(f *testing.F) {
	f.Add("idempotency-key", []byte("k1"), "idempotency-key", []byte("k2"))
	f.Add("idempotency-key", []byte(""), "x", []byte("y"))
	f.Add("a", []byte{0, 0xff}, "idempotency-key", []byte{0})
	f.Fuzz(func(t *testing.T, k1 string, v1 []byte, k2 string, v2 []byte) {
		hs := []kgo.RecordHeader{{Key: k1, Value: v1}, {Key: k2, Value: v2}}
		key, err := consume.KeyFromHeaders(hs, "idempotency-key")
		switch {
		case err == nil:
			if key == "" || !(k1 == "idempotency-key" && string(v1) == key || k2 == "idempotency-key" && string(v2) == key) {
				t.Fatalf("key %q is not a non-empty value of the header in %v", key, hs)
			}
		case errors.Is(err, consume.ErrNoKey), errors.Is(err, consume.ErrBadKey):
			if key != "" {
				t.Fatalf("error %v with key %q", err, key)
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}
