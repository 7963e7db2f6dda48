package consume

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Errors of key extraction.
var (
	// ErrNoKey: the record carries no idempotency key.
	ErrNoKey = errors.New("idemkafka: the record has no idempotency key")
	// ErrBadKey: the record's key cannot be read: the key function failed,
	// or two key headers disagree.
	ErrBadKey = errors.New("idemkafka: the record's idempotency key cannot be read")
)

// Item is a record with its key, as a [Processor] gets it.
type Item struct {
	Rec    *kgo.Record
	Scope  string
	Key    string
	KeyErr error // ErrNoKey or ErrBadKey (wrapped): see DecideKey
}

// Item extracts the key and scope of r.
func (o *Options) Item(r *kgo.Record) Item {
	it := Item{Rec: r}
	it.Key, it.KeyErr = o.key(r)
	if o.Scope != nil {
		it.Scope = o.Scope(r)
	}
	return it
}

func (o *Options) key(r *kgo.Record) (string, error) {
	if o.KeyFunc != nil {
		k, err := o.KeyFunc(r)
		switch {
		case errors.Is(err, ErrNoKey):
			return "", err
		case err != nil:
			return "", fmt.Errorf("%w: %w", ErrBadKey, err)
		case k == "":
			return "", ErrNoKey
		}
		return k, nil
	}
	return KeyFromHeaders(r.Headers, o.KeyHeader)
}

// KeyFromHeaders returns the value of the header name: ErrNoKey when there is
// none or it is empty, ErrBadKey when the header appears twice with
// different values (a producer that set it twice: which one is meant?).
func KeyFromHeaders(hs []kgo.RecordHeader, name string) (string, error) {
	var found []byte
	seen := false
	for _, h := range hs {
		if h.Key != name {
			continue
		}
		if seen && !bytes.Equal(h.Value, found) {
			return "", fmt.Errorf("%w: two %q headers with different values", ErrBadKey, name)
		}
		found, seen = h.Value, true
	}
	if len(found) == 0 {
		return "", ErrNoKey
	}
	return string(found), nil
}
