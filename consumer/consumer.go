package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// DefaultMaxAttempts is how many times a consumer runs a message's handler
// that fails without a permanent mark, or panics, before it dead-letters
// the message with [ReasonTooManyAttempts]. Each consumer's WithMaxAttempts
// changes it.
const DefaultMaxAttempts = 10

// MaxCopiedKey is the longest idempotency key a dead letter carries in
// [HeaderKey]; a longer one is recorded by [HeaderKeySize] and
// [HeaderKeySHA256] instead.
const MaxCopiedKey = 1024

// MaxHeaderValue is the longest value of a header this package names, the
// cause's text among them: an error's message can be long, a header should
// not be.
const MaxHeaderValue = 1024

// Reason says why a message was dead-lettered: the value of [HeaderReason]
// and of each consumer's Event.Reason.
type Reason string

// The reasons a message is dead-lettered.
const (
	// ReasonPermanent: the handler returned an error marked with
	// idem.Permanent, now or on an earlier delivery of the same key.
	ReasonPermanent Reason = "permanent"
	// ReasonTooManyAttempts: the handler failed or panicked MaxAttempts
	// times in a row, or the key was claimed more than the Guard's
	// Config.MaxAttempts times without an outcome (idem.ErrTooManyAttempts).
	ReasonTooManyAttempts Reason = "too-many-attempts"
	// ReasonMissingKey: the message carries no key ([ErrNoKey]), and the
	// consumer was not told to run such messages unguarded
	// (WithUnkeyedUnguarded).
	ReasonMissingKey Reason = "missing-key"
	// ReasonInvalidKey: the key the message carries cannot be used
	// ([KeyError]: empty, sent twice with different values, the key
	// function failed), or the Guard refused it (longer than its
	// Config.MaxKeyLen, refused by Config.ValidateKey).
	ReasonInvalidKey Reason = "invalid-key"
	// ReasonKeyReused: the key was first used with a different payload
	// (idem.ErrKeyReused).
	ReasonKeyReused Reason = "key-reused"
	// ReasonPanicked: a function the consumer calls for the message before
	// its handler (WithScope's, WithKeyFunc's, WithFingerprint's, the
	// Guard's Config.ValidateKey) panicked on it: a [PanicError] whose
	// Func names it. Such a function reads what the publisher sent, and
	// would panic again at every delivery: the message is not retried, and
	// its handler did not run.
	ReasonPanicked Reason = "panicked"
)

// The headers a dead letter carries besides the original message's own.
// Each consumer adds those of its broker: where the message came from
// (idemkafka's topic, partition and offset; idemnats' stream, subject and
// sequence; idemamqp's queue). The values are text; sizes are decimal,
// hashes lowercase hex.
const (
	HeaderReason = "idem-dead-letter-reason" // a [Reason]
	HeaderCause  = "idem-dead-letter-cause"  // the error's message, on one line, at most MaxHeaderValue bytes
	HeaderKey    = "idem-dead-letter-key"    // the idempotency key, when it had a usable one of at most MaxCopiedKey bytes

	// HeaderKeySize and HeaderKeySHA256 stand for a key longer than
	// MaxCopiedKey, which the dead letter does not copy.
	HeaderKeySize   = "idem-dead-letter-key-size"
	HeaderKeySHA256 = "idem-dead-letter-key-sha256"
	// HeaderBodySize and HeaderBodySHA256 stand for a body left out so
	// that the dead letter fits the broker's limit.
	HeaderBodySize   = "idem-dead-letter-body-size"
	HeaderBodySHA256 = "idem-dead-letter-body-sha256"
	// HeaderCutHeaders names the original headers left out so that the
	// dead letter fits, comma-separated (each name at most 64 bytes, the
	// list at most MaxHeaderValue bytes).
	HeaderCutHeaders = "idem-dead-letter-cut-headers"
	// HeaderRecordKeySize and HeaderRecordKeySHA256 stand for a Kafka
	// record's key left out with the body.
	HeaderRecordKeySize   = "idem-dead-letter-record-key-size"
	HeaderRecordKeySHA256 = "idem-dead-letter-record-key-sha256"
)

// ErrNoKey is the cause of a message dead-lettered because it carries no
// idempotency key ([ReasonMissingKey]). A key function returns it, or "",
// for a message without one.
var ErrNoKey = errors.New("the message has no idempotency key")

// KeyError is the cause of a message dead-lettered because the key it
// carries cannot be used ([ReasonInvalidKey]).
type KeyError struct {
	// Source is where the key was looked for: `header "idempotency-key"`,
	// "key function".
	Source string
	// Err says what is wrong with it; it wraps idem.ErrInvalidKey when the
	// Guard refused the key.
	Err error
}

func (e *KeyError) Error() string { return "idempotency key from " + e.Source + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *KeyError) Unwrap() error { return e.Err }

// PanicError is the error of a handler that panicked. The key is released
// and the message redelivered, as for an error without a permanent mark,
// until MaxAttempts ends it in the dead letter. It is also the cause of a
// message dead-lettered because another function the consumer calls for it
// panicked ([ReasonPanicked]).
type PanicError struct {
	// Func names the function that panicked, as "the scope function
	// (WithScope)"; "" for the handler.
	Func  string
	Value any    // what the function panicked with
	Stack []byte // the goroutine's stack at the panic
}

func (e *PanicError) Error() string {
	fn := e.Func
	if fn == "" {
		fn = "the handler"
	}
	return fmt.Sprintf("%s panicked: %v", fn, e.Value)
}

// TraceCarrier is the W3C trace context a message carried: its
// traceparent, tracestate and baggage headers, by lowercase name. Its
// methods are those of OpenTelemetry's propagation.TextMapCarrier, so a
// handler continues the producer's trace with
//
//	ctx = otel.GetTextMapPropagator().Extract(ctx, consumer.TraceFrom(ctx))
type TraceCarrier map[string]string

// TraceHeaders are the headers a [TraceCarrier] keeps.
var TraceHeaders = []string{"traceparent", "tracestate", "baggage"}

// Get returns the value of the header key, "" when the message had none.
func (c TraceCarrier) Get(key string) string { return c[strings.ToLower(key)] }

// Set sets the value of the header key.
func (c TraceCarrier) Set(key, value string) { c[strings.ToLower(key)] = value }

// Keys returns the names of the headers the carrier holds.
func (c TraceCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

type traceKey struct{}

// WithTrace returns ctx carrying c, for [TraceFrom]. The consumers call it;
// a test of a handler may too.
func WithTrace(ctx context.Context, c TraceCarrier) context.Context {
	if len(c) == 0 {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, c)
}

// TraceFrom returns the trace context of the message whose handler ctx
// belongs to: empty (not nil) when it carried none.
func TraceFrom(ctx context.Context) TraceCarrier {
	if c, ok := ctx.Value(traceKey{}).(TraceCarrier); ok {
		return c
	}
	return TraceCarrier{}
}
