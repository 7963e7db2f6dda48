package idemhttp

import (
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/adapter"
)

// Defaults of the options.
const (
	// DefaultHeader is the request header that carries the key.
	DefaultHeader = "Idempotency-Key"
	// ReplayedHeader is set to "true" on every replayed response.
	ReplayedHeader = "Idempotent-Replayed"
	// DefaultMaxBodyBytes is the longest request body read to fingerprint it.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxCachedBytes is the longest response body stored for replay.
	DefaultMaxCachedBytes = 1 << 20
	// DefaultRetryAfter is the Retry-After sent with 409 and 503.
	DefaultRetryAfter = time.Second
)

// DefaultUnstoredHeaders are the response header fields that are not
// stored, and so not replayed, by default: they belong to the client that
// received them (its session, its credentials), not to the operation. See
// [WithUnstoredHeaders]. Fields that an outer handler set before the
// middleware ran are never stored either.
var DefaultUnstoredHeaders = []string{"Set-Cookie", "Authentication-Info", "Clear-Site-Data"}

// Option configures the middleware; see [New].
type Option func(*options)

type options struct {
	adapter.Policy[*http.Request]
	header            string
	methods           []string
	syntax            Syntax
	maxBodyBytes      int64
	maxCachedBytes    int
	fingerprint       func(r *http.Request, body []byte) []byte
	cacheServerErrors bool
	unstored          []string
	retryAfter        time.Duration
	errorHandler      ErrorHandler
}

// WithScope sets the function that names the principal (an authenticated
// user, an API key's account) a request acts for. Keys are scoped by it:
// two principals that send the same key get two records, so one can never
// be sent the other's response. Return the same string for every request
// of a principal, up to idem.MaxScopeLen bytes (a longer one gets 400);
// requests scoped "" share one scope. Run the middleware after
// authentication, so the function can read the principal. [New] requires
// WithScope or [WithSharedScope].
func WithScope(f func(r *http.Request) string) Option { return func(o *options) { o.SetScope(f) } }

// WithSharedScope is the decision that all clients share one key space:
// a client that sends another's key with the same request gets the other's
// response, headers included. Only for a server whose clients trust each
// other (one internal caller) or whose keys are unguessable and private to
// each client and whose responses hold nothing a client must not see.
func WithSharedScope() Option { return func(o *options) { o.SetSharedScope() } }

// WithHeader sets the request header that carries the key. Default
// [DefaultHeader]; it must be a valid field name.
func WithHeader(name string) Option {
	return func(o *options) {
		if o.Check(isToken(name), "WithHeader(%q): not a valid header field name", name) {
			o.header = http.CanonicalHeaderKey(name)
			o.SetKeyName("the " + o.header + " header")
		}
	}
}

// WithMethods sets the request methods the middleware applies to; requests
// with any other method pass through untouched. Default POST and PATCH.
func WithMethods(methods ...string) Option {
	return func(o *options) {
		if !o.Check(len(methods) > 0, "WithMethods(): no method given") {
			return
		}
		for _, m := range methods {
			if !o.Check(isToken(m), "WithMethods: %q is not a valid method", m) {
				return
			}
		}
		o.methods = append([]string(nil), methods...)
	}
}

// WithRequired refuses requests of the covered methods that carry no key,
// with 400 ([ErrKeyMissing]). Default: they pass through to the handler
// without idempotency.
func WithRequired() Option { return func(o *options) { o.SetRequired() } }

// WithSyntax sets which forms of the header are accepted. Default [Lenient].
// The key's length and format are the Guard's: its Config.MaxKeyLen
// (255 bytes by default) and Config.ValidateKey, which see the client's key
// as sent, without the header's quotes.
func WithSyntax(s Syntax) Option {
	return func(o *options) {
		if o.Check(s == Lenient || s == Strict, "WithSyntax(%v): unknown syntax", s) {
			o.syntax = s
		}
	}
}

// WithMaxBodyBytes sets the longest request body the middleware reads (to
// fingerprint it); a longer one gets 413 ([ErrBodyTooLarge]) and the
// handler does not run. Default [DefaultMaxBodyBytes]; at least 1.
func WithMaxBodyBytes(n int64) Option {
	return func(o *options) {
		if o.Check(n >= 1, "WithMaxBodyBytes(%d): must be at least 1", n) {
			o.maxBodyBytes = n
		}
	}
}

// WithMaxCachedBytes sets the longest response body stored for replay. A
// longer response is served in full to its client and stored without its
// body: a retry does not run the handler again, and gets the first
// response's status and kept header fields, with a problem explaining that
// the body was too large to keep (type [TypeResponseNotKept]) and
// [ReplayedHeader]; a warning is logged and the Guard's Observer sees
// idem.OpTooLarge. The cap never exceeds what the Guard's store keeps, when
// the store tells it (storage.Store.MaxValueSize): a response whose stored form
// would not fit is stored without its body too. Default
// [DefaultMaxCachedBytes]; at least 1.
func WithMaxCachedBytes(n int) Option {
	return func(o *options) {
		if o.Check(n >= 1, "WithMaxCachedBytes(%d): must be at least 1", n) {
			o.maxCachedBytes = n
		}
	}
}

// WithFingerprint sets the function that turns a request and its body into
// the payload the Guard fingerprints: the same key with another payload
// gets 422. Default [DefaultFingerprint] (method, path, query and body).
func WithFingerprint(f func(r *http.Request, body []byte) []byte) Option {
	return func(o *options) {
		if o.Check(f != nil, "WithFingerprint(nil)") {
			o.fingerprint = f
		}
	}
}

// WithCacheServerErrors stores 5xx responses and replays them like any
// other. Default: a 5xx is served and the key released, so the client's
// retry runs the handler again.
func WithCacheServerErrors() Option { return func(o *options) { o.cacheServerErrors = true } }

// WithUnstoredHeaders replaces [DefaultUnstoredHeaders]: the response
// header fields that are not stored, and so not replayed. With no names
// every field is stored but those an outer handler set before the
// middleware ran, and hop-by-hop fields and Date, which never are.
func WithUnstoredHeaders(names ...string) Option {
	return func(o *options) {
		for _, n := range names {
			if !o.Check(isToken(n), "WithUnstoredHeaders: %q is not a valid header field name", n) {
				return
			}
		}
		o.unstored = append([]string{}, names...)
	}
}

// WithRetryAfter sets the Retry-After sent with 409 (in progress) and 503
// (store unavailable), rounded up to whole seconds. Default
// [DefaultRetryAfter].
func WithRetryAfter(d time.Duration) Option {
	return func(o *options) {
		if o.Check(d > 0, "WithRetryAfter(%v): must be positive", d) {
			o.retryAfter = d
		}
	}
}

// WithErrorHandler sets the handler that answers refused requests. Default
// [DefaultErrorHandler]; wrap it to change one case and keep the others.
func WithErrorHandler(h ErrorHandler) Option {
	return func(o *options) {
		if o.Check(h != nil, "WithErrorHandler(nil)") {
			o.errorHandler = h
		}
	}
}

// WithLogger sets the logger of warnings: outcomes the store did not take,
// undecodable stored responses. Default: the Guard's Config.Logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.SetLogger(l) } }

func (o *options) build(g *idem.Guard, opts []Option) error {
	*o = options{
		header:         DefaultHeader,
		methods:        []string{http.MethodPost, http.MethodPatch},
		maxBodyBytes:   DefaultMaxBodyBytes,
		maxCachedBytes: DefaultMaxCachedBytes,
		fingerprint:    DefaultFingerprint,
		unstored:       slices.Clone(DefaultUnstoredHeaders),
		retryAfter:     DefaultRetryAfter,
		errorHandler:   DefaultErrorHandler,
	}
	return adapter.Build(o, &o.Policy, adapter.Names{Pkg: "idemhttp", Request: "*http.Request", Key: "the " + DefaultHeader + " header"}, g, nil, opts, nil)
}
