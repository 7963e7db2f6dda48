package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Defaults of the options.
const (
	// DefaultMetadataKey is the metadata key that carries the idempotency key.
	DefaultMetadataKey = "idempotency-key"
	// DefaultMaxKeyLen is the longest key accepted, in bytes.
	DefaultMaxKeyLen = 255
)

// DefaultPermanentCodes are the status codes stored as the key's permanent
// outcome and replayed: errors that the same request gets again, so a
// retry must not run the handler again. Every other code releases the key,
// so a retry runs the handler: Unknown, Internal, Unavailable,
// DeadlineExceeded, Canceled, ResourceExhausted, Aborted, DataLoss and
// Unauthenticated (credentials get refreshed; the auth interceptor should
// run before this one anyway).
var DefaultPermanentCodes = []codes.Code{
	codes.InvalidArgument,
	codes.NotFound,
	codes.AlreadyExists,
	codes.PermissionDenied,
	codes.FailedPrecondition,
	codes.OutOfRange,
	codes.Unimplemented,
}

// Option configures an [Interceptor]; see [New].
type Option func(*options)

type options struct {
	key         string
	required    bool
	maxKeyLen   int
	validateKey func(key string) error
	methods     func(fullMethod string) bool
	permanent   map[codes.Code]bool
	scope       func(ctx context.Context) string
	fingerprint func(fullMethod string, req any) ([]byte, error)
	types       protoregistry.MessageTypeResolver
	failOpen    bool
	logger      *slog.Logger
	errs        []error
}

func (o *options) fail(format string, args ...any) {
	o.errs = append(o.errs, fmt.Errorf("idemgrpc: "+format, args...))
}

// WithMetadataKey sets the metadata key that carries the idempotency key.
// Default [DefaultMetadataKey]. It must be a valid, non-reserved metadata
// key; it is lowercased, as gRPC sends keys.
func WithMetadataKey(key string) Option {
	return func(o *options) {
		k := strings.ToLower(key)
		if k == "" || strings.HasPrefix(k, "grpc-") || strings.HasPrefix(k, ":") ||
			strings.IndexFunc(k, func(r rune) bool {
				return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
			}) >= 0 {
			o.fail("WithMetadataKey(%q): not a valid application metadata key", key)
			return
		}
		o.key = k
	}
}

// WithRequired refuses calls without a key with codes.InvalidArgument.
// Default: they pass through to the handler without idempotency.
func WithRequired() Option { return func(o *options) { o.required = true } }

// WithMaxKeyLen sets the longest key accepted, in bytes. Default
// [DefaultMaxKeyLen]; at least 1.
func WithMaxKeyLen(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.fail("WithMaxKeyLen(%d): must be at least 1", n)
			return
		}
		o.maxKeyLen = n
	}
}

// WithKeyValidator sets a check of the key's format (say, that it is a
// UUID); a key it refuses gets codes.InvalidArgument with its message.
// Default: none.
func WithKeyValidator(f func(key string) error) Option {
	return func(o *options) {
		if f == nil {
			o.fail("WithKeyValidator(nil)")
			return
		}
		o.validateKey = f
	}
}

// WithMethods sets which methods the interceptor applies to, by full method
// name ("/package.Service/Method"); the others pass through untouched.
// Default: every unary method, so that a client that sends a key always
// gets its semantics.
func WithMethods(f func(fullMethod string) bool) Option {
	return func(o *options) {
		if f == nil {
			o.fail("WithMethods(nil)")
			return
		}
		o.methods = f
	}
}

// WithPermanentCodes replaces [DefaultPermanentCodes]: the handler's errors
// with these codes are stored and replayed, the others release the key.
// codes.OK is not an error code and is refused.
func WithPermanentCodes(cs ...codes.Code) Option {
	return func(o *options) {
		m := make(map[codes.Code]bool, len(cs))
		for _, c := range cs {
			if c == codes.OK {
				o.fail("WithPermanentCodes: OK is not an error code")
				return
			}
			m[c] = true
		}
		o.permanent = m
	}
}

// WithScope sets the function that names the principal a call acts for.
// Keys are scoped by it: two principals that send the same key get two
// records, so one can never be sent the other's response. Default: no
// scope, all clients share one key space.
func WithScope(f func(ctx context.Context) string) Option {
	return func(o *options) {
		if f == nil {
			o.fail("WithScope(nil)")
			return
		}
		o.scope = f
	}
}

// WithFingerprint sets the function that turns a call into the payload the
// Guard fingerprints: the same key with another payload gets
// codes.InvalidArgument. Default [DefaultFingerprint] (method and request).
func WithFingerprint(f func(fullMethod string, req any) ([]byte, error)) Option {
	return func(o *options) {
		if f == nil {
			o.fail("WithFingerprint(nil)")
			return
		}
		o.fingerprint = f
	}
}

// WithTypes sets where a replay finds the message type named in a stored
// response. Default protoregistry.GlobalTypes, which holds every generated
// message; dynamic messages need their own (dynamicpb.NewTypes).
func WithTypes(r protoregistry.MessageTypeResolver) Option {
	return func(o *options) {
		if r == nil {
			o.fail("WithTypes(nil)")
			return
		}
		o.types = r
	}
}

// WithFailOpen runs the handler without idempotency when the store cannot
// be reached to claim the key. Default: codes.Unavailable.
func WithFailOpen() Option { return func(o *options) { o.failOpen = true } }

// WithLogger sets the logger of warnings. Default: the Guard's
// Config.Logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			o.fail("WithLogger(nil)")
			return
		}
		o.logger = l
	}
}

func (o *options) build(opts []Option) error {
	*o = options{
		key:         DefaultMetadataKey,
		maxKeyLen:   DefaultMaxKeyLen,
		fingerprint: DefaultFingerprint,
		types:       protoregistry.GlobalTypes,
	}
	for _, opt := range opts {
		if opt == nil {
			o.fail("New: nil Option")
			continue
		}
		opt(o)
	}
	if o.permanent == nil {
		o.permanent = make(map[codes.Code]bool, len(DefaultPermanentCodes))
		for _, c := range DefaultPermanentCodes {
			o.permanent[c] = true
		}
	}
	return errors.Join(o.errs...)
}
