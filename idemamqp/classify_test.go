package idemamqp

import (
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// How the broker's close of the publishing channel is read: a channel
// error of the publish is a refusal (a message too large is one that a
// stripped dead letter may get past); the connection's end is an outage.
func TestPublishingChannelClose(t *testing.T) {
	for _, tc := range []struct {
		e              *amqp.Error
		refused, strip bool
	}{
		{&amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no exchange 'dlx' in vhost '/'"}, true, false},
		{&amqp.Error{Code: amqp.AccessRefused, Reason: "ACCESS_REFUSED - write access to exchange 'dlx' refused"}, true, false},
		{&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - message size 134217729 is larger than configured max size 134217728"}, true, true},
		{&amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure"}, false, false},
		{&amqp.Error{Code: amqp.FrameError, Reason: "FRAME_ERROR"}, false, false},
		{nil, false, false},
	} {
		s := &session{pub: &amqp.Channel{}}
		err := s.closedBy(tc.e)
		r, refused := errors.AsType[*refusedError](err)
		if refused != tc.refused || (refused && r.strip != tc.strip) || s.pub != nil {
			t.Errorf("close %v: %v (refused %v); want refused %v, strip %v, and the channel forgotten", tc.e, err, refused, tc.refused, tc.strip)
		}
		if tc.e != nil && !strings.Contains(err.Error(), tc.e.Reason) {
			t.Errorf("close %v: %q does not say why", tc.e, err)
		}
	}
}

// The size of a content header as amqp091 writes it, which Fit's count
// bounds and the dead letter is checked against.
func TestHeaderFrameSize(t *testing.T) {
	p := amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent}
	base := headerFrameSize(p)
	if base != 8+14+1+16+1 {
		t.Errorf("a content header with a content-type and a delivery mode is %d bytes, want 40", base)
	}
	p.Headers = amqp.Table{"k": "v", "n": int32(1), "x-death": []any{amqp.Table{"count": int64(1)}}}
	want := base + 4 + (1 + 1 + 5 + 1) + (1 + 1 + 5) + (1 + 7 + 5 + (1 + 4 + (1 + 5 + 9)))
	if got := headerFrameSize(p); got != want {
		t.Errorf("with headers: %d bytes, want %d", got, want)
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ url, shown string }{
		{"amqp://guest:s3cret@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"amqp://guest:s3cret@127.0.0.1:bad/", "amqp://guest:xxxxx@127.0.0.1:bad/"},
		{"amqp://guest@127.0.0.1/", "amqp://guest@127.0.0.1/"},
		{"amqp://127.0.0.1/", "amqp://127.0.0.1/"},
		// A password with an unescaped "#", "?" or "/" that url.Parse takes
		// for a port and a fragment, query or path.
		{"amqp://guest:12#s3cret@127.0.0.1/", "amqp://guest:xxxxx@127.0.0.1/"},
		{"amqp://guest:12?s3cret@127.0.0.1/", "amqp://guest:xxxxx@127.0.0.1/"},
		{"amqp://guest:12/s3cret@127.0.0.1/", "amqp://guest:xxxxx@127.0.0.1/"},
	} {
		shown, secrets := redact(tc.url)
		if shown != tc.shown || (strings.Contains(tc.url, "s3cret") && (len(secrets) == 0 || !strings.Contains(secrets[0], "s3cret"))) {
			t.Errorf("redact(%q) = %q, %q; want %q and the password", tc.url, shown, secrets, tc.shown)
		}
	}
}
