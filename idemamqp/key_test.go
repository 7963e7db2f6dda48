package idemamqp_test

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/idemamqp"
)

func TestHeaderKey(t *testing.T) {
	key := idemamqp.HeaderKey("idempotency-key")
	for _, tc := range []struct {
		name    string
		headers amqp.Table
		want    string
		wantErr bool
	}{
		{"string", amqp.Table{"idempotency-key": "order-1"}, "order-1", false},
		{"bytes", amqp.Table{"idempotency-key": []byte("order-1")}, "order-1", false},
		{"any bytes", amqp.Table{"idempotency-key": "\x00\xff:|"}, "\x00\xff:|", false},
		{"absent", amqp.Table{"other": "x"}, "", false},
		{"no headers", nil, "", false},
		{"empty", amqp.Table{"idempotency-key": ""}, "", true},
		{"empty bytes", amqp.Table{"idempotency-key": []byte{}}, "", true},
		{"number", amqp.Table{"idempotency-key": int64(42)}, "", true},
		{"table", amqp.Table{"idempotency-key": amqp.Table{"a": "b"}}, "", true},
		{"nil value", amqp.Table{"idempotency-key": nil}, "", true},
		{"other case", amqp.Table{"Idempotency-Key": "order-1"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := key(amqp.Delivery{Headers: tc.headers})
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("key = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
			if _, ok := errors.AsType[*idemamqp.KeyError](err); err != nil && !ok {
				t.Errorf("error %T, want *KeyError", err)
			}
		})
	}
}

func TestMessageIDKey(t *testing.T) {
	if k, err := idemamqp.MessageIDKey(amqp.Delivery{MessageId: "m-1"}); k != "m-1" || err != nil {
		t.Errorf("MessageIDKey = %q, %v; want m-1", k, err)
	}
	if k, err := idemamqp.MessageIDKey(amqp.Delivery{}); k != "" || err != nil {
		t.Errorf("MessageIDKey of no message-id = %q, %v; want no key", k, err)
	}
}

// FuzzHeaderKey decodes headers as the broker sends them: any table
// amqp091 reads off the wire. The key is the header's bytes, or no key, or
// a *KeyError; never a panic, never an empty key without an error.
func FuzzHeaderKey(f *testing.F) {
	f.Add("idempotency-key", "order-1", []byte(nil), int64(0), uint8(0))
	f.Add("idempotency-key", "", []byte{}, int64(0), uint8(1))
	f.Add("idempotency-key", "", []byte{0xff}, int64(7), uint8(2))
	f.Add("x", "order-1", []byte(nil), int64(0), uint8(3))
	key := idemamqp.HeaderKey("idempotency-key")
	f.Fuzz(func(t *testing.T, name, s string, b []byte, n int64, kind uint8) {
		var v any
		switch kind % 4 {
		case 0:
			v = s
		case 1:
			v = b
		case 2:
			v = n
		case 3:
			v = amqp.Table{s: b}
		}
		got, err := key(amqp.Delivery{Headers: amqp.Table{name: v}})
		switch {
		case err != nil:
			if got != "" {
				t.Errorf("key %q beside the error %v", got, err)
			}
			if _, ok := errors.AsType[*idemamqp.KeyError](err); !ok {
				t.Errorf("error %T, want *KeyError", err)
			}
		case name != "idempotency-key":
			if got != "" {
				t.Errorf("key %q from header %q", got, name)
			}
		case got == "":
			t.Errorf("no key and no error for %#v", v)
		case kind%4 == 0 && got != s, kind%4 == 1 && got != string(b):
			t.Errorf("key %q, want the header's bytes %#v", got, v)
		}
	})
}
