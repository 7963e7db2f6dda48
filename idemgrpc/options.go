package idemgrpc

import (
	"context"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/adapter"
)

// Defaults of the options.
const (
	// DefaultMetadataKey is the metadata key that carries the idempotency key.
	DefaultMetadataKey = "idempotency-key"
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
	adapter.Policy[context.Context]
	key         string
	methods     func(fullMethod string) bool
	permanent   map[codes.Code]bool
	fingerprint func(fullMethod string, req any) ([]byte, error)
	types       protoregistry.MessageTypeResolver
}

// WithScope sets the function that names the principal a call acts for,
// from the call's context (the peer's certificate, a token an
// authentication interceptor checked). Keys are scoped by it: two
// principals that send the same key get two records, so one can never be
// sent the other's response. Return the same string for every call of a
// principal, up to idem.MaxScopeLen bytes (longer: codes.InvalidArgument).
// Chain this interceptor after authentication. [New] requires WithScope or
// [WithSharedScope].
func WithScope(f func(ctx context.Context) string) Option { return func(o *options) { o.SetScope(f) } }

// WithSharedScope is the decision that all clients share one key space:
// a client that sends another's key with the same request gets the other's
// response. Only for a server whose clients trust each other (one internal
// caller) or whose keys are unguessable and private to each client.
func WithSharedScope() Option { return func(o *options) { o.SetSharedScope() } }

// WithLogger sets the logger of warnings. Default: the Guard's
// Config.Logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.SetLogger(l) } }

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
			o.Fail("WithMetadataKey(%q): not a valid application metadata key", key)
			return
		}
		o.key = k
		o.SetKeyName("the " + k + " metadata")
	}
}

// WithRequired refuses calls without a key with codes.InvalidArgument.
// Default: they pass through to the handler without idempotency. The key's
// length and format are the Guard's: its Config.MaxKeyLen (255 bytes by
// default) and Config.ValidateKey.
func WithRequired() Option { return func(o *options) { o.SetRequired() } }

// WithMethods sets which methods the interceptor applies to, by full method
// name ("/package.Service/Method"); the others pass through untouched, key
// or not. Default: every method but those whose proto declares
// "option idempotency_level = NO_SIDE_EFFECTS;" (reads, which need no
// idempotency: their answer is not stored), found by name in
// protoregistry.GlobalFiles. A read method that does not declare it is
// guarded; name the mutations with WithMethods to leave reads alone.
func WithMethods(f func(fullMethod string) bool) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithMethods(nil)") {
			o.methods = f
		}
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
				o.Fail("WithPermanentCodes: OK is not an error code")
				return
			}
			m[c] = true
		}
		o.permanent = m
	}
}

// WithFingerprint sets the function that turns a call into the payload the
// Guard fingerprints: the same key with another payload gets
// codes.InvalidArgument. Default [DefaultFingerprint] (method and request).
func WithFingerprint(f func(fullMethod string, req any) ([]byte, error)) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithFingerprint(nil)") {
			o.fingerprint = f
		}
	}
}

// WithTypes sets where a replay finds the message type named in a stored
// response. Default protoregistry.GlobalTypes, which holds every generated
// message; dynamic messages need their own (dynamicpb.NewTypes).
func WithTypes(r protoregistry.MessageTypeResolver) Option {
	return func(o *options) {
		if o.Check(r != nil, "WithTypes(nil)") {
			o.types = r
		}
	}
}

func (o *options) build(g *idem.Guard, opts []Option) error {
	*o = options{
		key:         DefaultMetadataKey,
		fingerprint: DefaultFingerprint,
		types:       protoregistry.GlobalTypes,
	}
	err := adapter.Build(o, &o.Policy, adapter.Names{Pkg: "idemgrpc", Request: "context.Context", Key: "the " + DefaultMetadataKey + " metadata"}, g, nil, opts, nil)
	if o.permanent == nil {
		o.permanent = make(map[codes.Code]bool, len(DefaultPermanentCodes))
		for _, c := range DefaultPermanentCodes {
			o.permanent[c] = true
		}
	}
	return err
}
