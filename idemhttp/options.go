package idemhttp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Defaults of the options.
const (
	// DefaultHeader is the request header that carries the key.
	DefaultHeader = "Idempotency-Key"
	// ReplayedHeader is set to "true" on every replayed response.
	ReplayedHeader = "Idempotent-Replayed"
	// DefaultMaxKeyLen is the longest key accepted, in bytes.
	DefaultMaxKeyLen = 255
	// DefaultMaxBodyBytes is the longest request body read to fingerprint it.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxCachedBytes is the longest response body stored for replay.
	DefaultMaxCachedBytes = 1 << 20
	// DefaultRetryAfter is the Retry-After sent with 409 and 503.
	DefaultRetryAfter = time.Second
)

// Option configures the middleware; see [New].
type Option func(*options)

type options struct {
	header            string
	methods           []string
	required          bool
	syntax            Syntax
	maxKeyLen         int
	validateKey       func(key string) error
	maxBodyBytes      int64
	maxCachedBytes    int
	fingerprint       func(r *http.Request, body []byte) []byte
	scope             func(r *http.Request) string
	cacheServerErrors bool
	failOpen          bool
	retryAfter        time.Duration
	errorHandler      ErrorHandler
	logger            *slog.Logger
	errs              []error
}

func (o *options) fail(format string, args ...any) {
	o.errs = append(o.errs, fmt.Errorf("idemhttp: "+format, args...))
}

// WithHeader sets the request header that carries the key. Default
// [DefaultHeader]; it must be a valid field name.
func WithHeader(name string) Option {
	return func(o *options) {
		if !isToken(name) {
			o.fail("WithHeader(%q): not a valid header field name", name)
			return
		}
		o.header = http.CanonicalHeaderKey(name)
	}
}

// WithMethods sets the request methods the middleware applies to; requests
// with any other method pass through untouched. Default POST and PATCH.
func WithMethods(methods ...string) Option {
	return func(o *options) {
		if len(methods) == 0 {
			o.fail("WithMethods(): no method given")
			return
		}
		for _, m := range methods {
			if !isToken(m) {
				o.fail("WithMethods: %q is not a valid method", m)
				return
			}
		}
		o.methods = append([]string(nil), methods...)
	}
}

// WithRequired refuses requests of the covered methods that carry no key,
// with 400 ([ErrKeyMissing]). Default: they pass through to the handler
// without idempotency.
func WithRequired() Option { return func(o *options) { o.required = true } }

// WithSyntax sets which forms of the header are accepted. Default [Lenient].
func WithSyntax(s Syntax) Option {
	return func(o *options) {
		if s != Lenient && s != Strict {
			o.fail("WithSyntax(%v): unknown syntax", s)
			return
		}
		o.syntax = s
	}
}

// WithMaxKeyLen sets the longest key accepted, in bytes (the key itself, not
// the header's quotes). Default [DefaultMaxKeyLen]; at least 1.
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
// UUID), as the IETF draft recommends; a key it refuses gets 400 with the
// error's message as the detail. Default: none.
func WithKeyValidator(f func(key string) error) Option {
	return func(o *options) {
		if f == nil {
			o.fail("WithKeyValidator(nil)")
			return
		}
		o.validateKey = f
	}
}

// WithMaxBodyBytes sets the longest request body the middleware reads (to
// fingerprint it); a longer one gets 413 ([ErrBodyTooLarge]) and the
// handler does not run. Default [DefaultMaxBodyBytes]; at least 1.
func WithMaxBodyBytes(n int64) Option {
	return func(o *options) {
		if n < 1 {
			o.fail("WithMaxBodyBytes(%d): must be at least 1", n)
			return
		}
		o.maxBodyBytes = n
	}
}

// WithMaxCachedBytes sets the longest response body stored for replay. A
// longer response is still served in full to its client, but not stored:
// the key is released and a retry runs the handler again. Default
// [DefaultMaxCachedBytes]; at least 1.
func WithMaxCachedBytes(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.fail("WithMaxCachedBytes(%d): must be at least 1", n)
			return
		}
		o.maxCachedBytes = n
	}
}

// WithFingerprint sets the function that turns a request and its body into
// the payload the Guard fingerprints: the same key with another payload
// gets 422. Default [DefaultFingerprint] (method, path, query and body).
func WithFingerprint(f func(r *http.Request, body []byte) []byte) Option {
	return func(o *options) {
		if f == nil {
			o.fail("WithFingerprint(nil)")
			return
		}
		o.fingerprint = f
	}
}

// WithScope sets the function that names the principal (an authenticated
// user, an API key's account) a request acts for. Keys are scoped by it:
// two principals that send the same key get two records, so one can never
// read the other's response. Return the same non-empty string for every
// request of a principal; requests scoped "" share one scope. Default: no
// scope, all clients share one key space.
func WithScope(f func(r *http.Request) string) Option {
	return func(o *options) {
		if f == nil {
			o.fail("WithScope(nil)")
			return
		}
		o.scope = f
	}
}

// WithCacheServerErrors stores 5xx responses and replays them like any
// other. Default: a 5xx is served and the key released, so the client's
// retry runs the handler again.
func WithCacheServerErrors() Option { return func(o *options) { o.cacheServerErrors = true } }

// WithFailOpen runs the handler without idempotency when the store cannot
// be reached to claim the key. Default: 503 ([idem.ErrStoreUnavailable]),
// as duplicates of a payment are worse than a refusal.
func WithFailOpen() Option { return func(o *options) { o.failOpen = true } }

// WithRetryAfter sets the Retry-After sent with 409 (in progress) and 503
// (store unavailable), rounded up to whole seconds. Default
// [DefaultRetryAfter].
func WithRetryAfter(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.fail("WithRetryAfter(%v): must be positive", d)
			return
		}
		o.retryAfter = d
	}
}

// WithErrorHandler sets the handler that answers refused requests. Default
// [DefaultErrorHandler]; wrap it to change one case and keep the others.
func WithErrorHandler(h ErrorHandler) Option {
	return func(o *options) {
		if h == nil {
			o.fail("WithErrorHandler(nil)")
			return
		}
		o.errorHandler = h
	}
}

// WithLogger sets the logger of warnings: outcomes the store did not take,
// undecodable stored responses. Default: the Guard's Config.Logger.
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
		header:         DefaultHeader,
		methods:        []string{http.MethodPost, http.MethodPatch},
		maxKeyLen:      DefaultMaxKeyLen,
		maxBodyBytes:   DefaultMaxBodyBytes,
		maxCachedBytes: DefaultMaxCachedBytes,
		fingerprint:    DefaultFingerprint,
		retryAfter:     DefaultRetryAfter,
		errorHandler:   DefaultErrorHandler,
	}
	for _, opt := range opts {
		if opt == nil {
			o.fail("New: nil Option")
			continue
		}
		opt(o)
	}
	return errors.Join(o.errs...)
}
