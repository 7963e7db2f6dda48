package idemamqp

import (
	"context"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/consumer"
	"github.com/idemgo/idem/idemtest"
)

// keyOf returns a consumer's key function over a Guard of the default
// configuration (MaxKeyLen 255), with opts.
func keyOf(t testing.TB, opts ...Option) func(amqp.Delivery) (string, error) {
	t.Helper()
	g := idemtest.Guard(t, idemtest.MemStore(t), idem.Config{})
	c, err := New(g, "amqp://127.0.0.1/", "q", func(ctx context.Context, d amqp.Delivery) error { return nil },
		append([]Option{WithSharedScope(), WithDiscardPoison()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c.o.Key
}

func TestKeyHeader(t *testing.T) {
	key := keyOf(t)
	for _, tc := range []struct {
		name    string
		headers amqp.Table
		want    string
		why     string // in the *consumer.KeyError; "" for none
	}{
		{"string", amqp.Table{"idempotency-key": "order-1"}, "order-1", ""},
		{"bytes", amqp.Table{"idempotency-key": []byte("order-1")}, "order-1", ""},
		{"any bytes", amqp.Table{"idempotency-key": "\x00\xff:|"}, "\x00\xff:|", ""},
		{"absent", amqp.Table{"other": "x"}, "", ""},
		{"no headers", nil, "", ""},
		{"empty", amqp.Table{"idempotency-key": ""}, "", "empty"},
		{"empty bytes", amqp.Table{"idempotency-key": []byte{}}, "", "empty"},
		{"number", amqp.Table{"idempotency-key": int64(42)}, "", "a int64, not a string"},
		{"table", amqp.Table{"idempotency-key": amqp.Table{"a": "b"}}, "", "not a string"},
		{"nil value", amqp.Table{"idempotency-key": nil}, "", "not a string"},
		{"too long", amqp.Table{"idempotency-key": strings.Repeat("k", 256)}, "", "longer than 255"},
		{"other case", amqp.Table{"Idempotency-Key": "order-1"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := key(amqp.Delivery{Headers: tc.headers})
			ke, isKeyErr := errors.AsType[*consumer.KeyError](err)
			switch {
			case tc.why == "" && (got != tc.want || err != nil):
				t.Fatalf("key = %q, %v; want %q", got, err, tc.want)
			case tc.why != "" && (got != "" || !isKeyErr || !strings.Contains(err.Error(), tc.why)):
				t.Fatalf("key = %q, %v; want a *consumer.KeyError saying %q", got, err, tc.why)
			case isKeyErr && ke.Source != `header "idempotency-key"`:
				t.Errorf("KeyError source %q", ke.Source)
			}
		})
	}
}

func TestMessageIDKey(t *testing.T) {
	key := keyOf(t, WithKeyFunc(MessageIDKey))
	if k, err := key(amqp.Delivery{MessageId: "m-1"}); k != "m-1" || err != nil {
		t.Errorf("MessageIDKey = %q, %v; want m-1", k, err)
	}
	if k, err := key(amqp.Delivery{}); k != "" || err != nil {
		t.Errorf("MessageIDKey of no message-id = %q, %v; want no key", k, err)
	}
}

// FuzzKeyHeader decodes headers as the broker sends them: any table
// amqp091 reads off the wire. The key is the header's bytes, or no key, or
// a *consumer.KeyError; never a panic, never an empty key without an error.
func FuzzKeyHeader(f *testing.F) {
	f.Add("idempotency-key", "order-1", []byte(nil), int64(0), uint8(0))
	f.Add("idempotency-key", "", []byte{}, int64(0), uint8(1))
	f.Add("idempotency-key", "", []byte{0xff}, int64(7), uint8(2))
	f.Add("x", "order-1", []byte(nil), int64(0), uint8(3))
	key := keyOf(f, WithKeyHeader("idempotency-key"))
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
			if _, ok := errors.AsType[*consumer.KeyError](err); !ok {
				t.Errorf("error %T, want *consumer.KeyError", err)
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
