package kafkapub

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/idemgo/idem/outbox"
)

// TestMarkPermanent: of the records of a partition refused as too large,
// the largest is permanent and the others, refused with its batch, are
// held back; a partition of its own has a largest of its own.
func TestMarkPermanent(t *testing.T) {
	msgs := []outbox.Message{
		{Destination: "t", Payload: make([]byte, 10)},
		{Destination: "t", Payload: make([]byte, 2000)},
		{Destination: "t", Payload: make([]byte, 10)},
		{Destination: "t", Payload: make([]byte, 500)},
		{Destination: "u", Payload: make([]byte, 10)},
		{Destination: "t", Payload: make([]byte, 10)},
	}
	partitions := []int{0, 0, 0, 1, 0, 1}
	errs := []error{kerr.MessageTooLarge, kerr.MessageTooLarge, nil, kerr.MessageTooLarge, kerr.InvalidTopicException, kerr.MessageTooLarge}
	markPermanent(msgs, partitions, errs)
	for i, want := range []string{"held back", "permanent", "nil", "permanent", "permanent", "held back"} {
		var got string
		switch err := errs[i]; {
		case err == nil:
			got = "nil"
		case outbox.IsPermanent(err):
			got = "permanent"
		case errors.Is(err, outbox.ErrHeldBack) && errors.Is(err, kerr.MessageTooLarge):
			got = "held back"
		default:
			got = err.Error()
		}
		if got != want {
			t.Errorf("record %d: %s, want %s", i, got, want)
		}
	}
}
