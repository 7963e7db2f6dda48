package outbox

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Message is one message to publish: what [Enqueue] writes in the caller's
// transaction and what the [Relay] hands to its [Publisher].
type Message struct {
	// ID identifies the message downstream: publishers put it where the
	// next hop deduplicates (NATS Nats-Msg-Id, the AMQP message-id, a Kafka
	// header), and it becomes the consumer's idempotency key. Every
	// re-publication of the message (after a relay crash, say) carries the
	// same ID. Empty: Enqueue sets a random one ([NewID]); set it yourself
	// to know it, or to derive it from the business event ("order-42/paid")
	// so that enqueueing the same event twice yields one charge downstream.
	// At most [MaxIDLen] bytes of UTF-8 without control characters.
	ID string

	// Destination is where the publisher sends the message: a Kafka topic,
	// a NATS subject, an AMQP routing key. 1 to [MaxDestinationLen] bytes
	// of UTF-8 without control characters; the publisher may refuse more.
	Destination string

	// Key orders messages: those with the same Key are published in the
	// order they were enqueued (see the package documentation for what that
	// means across transactions), by whichever relay holds the key's
	// partition. Publishers that know keys use it too (Kafka: the record
	// key, and so the partition). Any bytes, at most [MaxKeyLen]. Empty: the
	// message is ordered with no other; it goes to a partition chosen by
	// its ID.
	Key string

	// Headers are passed to the broker as message headers. Names are 1 to
	// 255 bytes of printable ASCII other than ':'; values UTF-8 without
	// CR, LF or NUL, at most [MaxHeaderValueLen] bytes.
	Headers map[string]string

	// Payload is the message body, any bytes.
	Payload []byte

	// CreatedAt is when the message was enqueued, by the database's clock.
	// Set by the Relay on the messages it publishes; ignored by Enqueue.
	CreatedAt time.Time
}

// Limits of a [Message]'s fields.
const (
	MaxIDLen          = 255
	MaxDestinationLen = 255
	MaxKeyLen         = 4096
	MaxHeaderNameLen  = 255
	MaxHeaderValueLen = 4096
	maxHeaders        = 256
)

// NewID returns a random message ID: 26 characters of base32 (130 random
// bits, [crypto/rand.Text]), what [Enqueue] sets on a message without one.
func NewID() string { return rand.Text() }

// ErrInvalidMessage is wrapped by the [*MessageError] that Enqueue returns
// for a message it refuses.
var ErrInvalidMessage = errors.New("outbox: invalid message")

// ErrTooLarge is wrapped, beside [ErrInvalidMessage], by the
// [*MessageError] of a message whose payload is larger than the outbox's
// cap (Config.MaxPayload).
var ErrTooLarge = errors.New("outbox: payload too large")

// MessageError says which message Enqueue refused, and why. It wraps
// [ErrInvalidMessage], [ErrTooLarge] for a payload over the cap, and the
// error of Config.CheckDestination for a destination it refused.
type MessageError struct {
	Index  int    // the message's position among Enqueue's arguments
	Field  string // "ID", "Destination", "Key", "Headers" or "Payload"
	Reason string
	Err    error // the error of Config.CheckDestination, else nil
}

func (e *MessageError) Error() string {
	return fmt.Sprintf("outbox: message %d: %s %s", e.Index, e.Field, e.Reason)
}

// Unwrap returns [ErrInvalidMessage], [ErrTooLarge] for a payload over the
// cap, and Err if set.
func (e *MessageError) Unwrap() []error {
	errs := []error{ErrInvalidMessage}
	if e.Field == "Payload" {
		errs = append(errs, ErrTooLarge)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// check validates m, the i-th message of a call, against the limits of a
// Message, maxPayload and checkDest (if set), and returns m with its ID
// set.
func check(i int, m Message, maxPayload int, checkDest func(string) error) (Message, error) {
	fail := func(field, format string, args ...any) (Message, error) {
		return m, &MessageError{Index: i, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if m.ID == "" {
		m.ID = NewID()
	} else if reason := badText(m.ID, MaxIDLen); reason != "" {
		return fail("ID", "%s", reason)
	}
	if m.Destination == "" {
		return fail("Destination", "is empty")
	}
	if reason := badText(m.Destination, MaxDestinationLen); reason != "" {
		return fail("Destination", "%s", reason)
	}
	if checkDest != nil {
		if err := checkDest(m.Destination); err != nil {
			return m, &MessageError{Index: i, Field: "Destination", Reason: "refused: " + err.Error(), Err: err}
		}
	}
	if len(m.Key) > MaxKeyLen {
		return fail("Key", "is %d bytes, longer than %d", len(m.Key), MaxKeyLen)
	}
	if len(m.Payload) > maxPayload {
		return fail("Payload", "is %d bytes, larger than the cap of %d (Config.MaxPayload)", len(m.Payload), maxPayload)
	}
	if len(m.Headers) > maxHeaders {
		return fail("Headers", "has %d entries, more than %d", len(m.Headers), maxHeaders)
	}
	for name, value := range m.Headers {
		if reason := badHeaderName(name); reason != "" {
			return fail("Headers", "name %q %s", name, reason)
		}
		if reason := badHeaderValue(value); reason != "" {
			return fail("Headers", "value of %q %s", name, reason)
		}
	}
	return m, nil
}

// badText says what is wrong with s as an ID or a destination, or "".
func badText(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("is %d bytes, longer than %d", len(s), max)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.ContainsFunc(s, isControl):
		return "holds a control character"
	}
	return ""
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }

func badHeaderName(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > MaxHeaderNameLen:
		return fmt.Sprintf("is longer than %d bytes", MaxHeaderNameLen)
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c >= 0x7f || c == ':' {
			return "holds a byte other than printable ASCII without ':' and space"
		}
	}
	return ""
}

func badHeaderValue(v string) string {
	switch {
	case len(v) > MaxHeaderValueLen:
		return fmt.Sprintf("is longer than %d bytes", MaxHeaderValueLen)
	case !utf8.ValidString(v):
		return "is not valid UTF-8"
	case strings.ContainsAny(v, "\r\n\x00"):
		return "holds CR, LF or NUL"
	}
	return ""
}

// headersVersion is the first byte of an encoded header set.
const headersVersion = 1

// encodeHeaders returns h in the headers column's format, nil for none:
// a version byte (1), the number of entries as a uvarint, then each entry
// sorted by name as the name's length (uvarint), the name, the value's
// length (uvarint) and the value.
func encodeHeaders(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
	names := make([]string, 0, len(h))
	size := 1 + binary.MaxVarintLen64
	for n, v := range h {
		names = append(names, n)
		size += 2*binary.MaxVarintLen64 + len(n) + len(v)
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	b = append(b, headersVersion)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
		b = binary.AppendUvarint(b, uint64(len(h[n])))
		b = append(b, h[n]...)
	}
	return b
}

// ErrCorruptHeaders is returned by [DecodeHeaders] for bytes that are not
// an encoded header set.
var ErrCorruptHeaders = errors.New("outbox: corrupt headers")

// DecodeHeaders decodes the headers column of an outbox row (the format
// is in the package documentation). nil or empty b is no headers. Bytes
// that are not a header set as Enqueue writes them (names sorted and
// distinct, nothing after the last) yield an error wrapping
// [ErrCorruptHeaders].
func DecodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[0] != headersVersion {
		return nil, fmt.Errorf("%w: version %d", ErrCorruptHeaders, b[0])
	}
	b = b[1:]
	n, b, err := uvarint(b)
	if err != nil {
		return nil, err
	}
	if n > maxHeaders || n == 0 {
		return nil, fmt.Errorf("%w: %d entries", ErrCorruptHeaders, n)
	}
	h := make(map[string]string, n)
	prev := ""
	for i := range n {
		var name, value string
		if name, b, err = lengthPrefixed(b); err != nil {
			return nil, err
		}
		if value, b, err = lengthPrefixed(b); err != nil {
			return nil, err
		}
		if i > 0 && name <= prev {
			return nil, fmt.Errorf("%w: name %q after %q, want names sorted and distinct", ErrCorruptHeaders, name, prev)
		}
		h[name], prev = value, name
	}
	if len(b) > 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last entry", ErrCorruptHeaders, len(b))
	}
	return h, nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || (k > 1 && b[k-1] == 0) { // overflow, truncated, or not minimal
		return 0, nil, fmt.Errorf("%w: bad length", ErrCorruptHeaders)
	}
	return n, b[k:], nil
}

func lengthPrefixed(b []byte) (string, []byte, error) {
	n, b, err := uvarint(b)
	if err != nil {
		return "", nil, err
	}
	if n > uint64(len(b)) {
		return "", nil, fmt.Errorf("%w: a length of %d past the end", ErrCorruptHeaders, n)
	}
	return string(b[:n]), b[n:], nil
}
