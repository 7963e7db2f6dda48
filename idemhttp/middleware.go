package idemhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/idemgo/idem"
)

// New returns the middleware that makes the covered requests (POST and
// PATCH by default) idempotent with g, keyed by the Idempotency-Key header.
// See the package documentation for what it answers in every case.
//
// Waiting for a concurrent request's outcome is the Guard's: with
// Config.Wait set, a request whose key is in progress waits up to that long
// for the outcome and replays it, else it gets 409 at once. The Guard keeps
// its other settings too (lease, retention, MaxAttempts, local cache).
//
// New fails when g is nil, an option is invalid, or g cannot hold the
// middleware's keys: g's Config.MaxKeyLen must be at least 33 (the length
// of a hashed scoped key, see [GuardKey]) and its Config.ValidateKey unset,
// since it would see scoped keys rather than the client's (use
// [WithKeyValidator]).
func New(g *idem.Guard, opts ...Option) (func(http.Handler) http.Handler, error) {
	if g == nil {
		return nil, errors.New("idemhttp: New: Guard is nil")
	}
	m := &middleware{g: g}
	if err := m.o.build(opts); err != nil {
		return nil, err
	}
	cfg := g.Config()
	if cfg.MaxKeyLen < minGuardKeyLen {
		return nil, fmt.Errorf("idemhttp: New: the Guard's Config.MaxKeyLen %d is below %d, the length of a hashed key", cfg.MaxKeyLen, minGuardKeyLen)
	}
	if cfg.ValidateKey != nil {
		return nil, errors.New("idemhttp: New: the Guard's Config.ValidateKey is set, but it would see scoped keys, not the client's: use WithKeyValidator")
	}
	m.guardMaxKeyLen = cfg.MaxKeyLen
	if m.o.logger == nil {
		m.o.logger = cfg.Logger
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			next = http.NotFoundHandler()
		}
		return &handler{m: m, next: next}
	}, nil
}

type middleware struct {
	g              *idem.Guard
	o              options
	guardMaxKeyLen int
}

type handler struct {
	m    *middleware
	next http.Handler
}

// DefaultFingerprint is the default payload of a request (see
// [WithFingerprint]): the SHA-256 of its method, escaped path, raw query
// and body, each length-prefixed so no two requests share one by
// shifting bytes between the parts.
func DefaultFingerprint(r *http.Request, body []byte) []byte {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, part := range [...]string{r.Method, r.URL.EscapedPath(), r.URL.RawQuery} {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		io.WriteString(h, part)
	}
	h.Write(body)
	return h.Sum(make([]byte, 0, sha256.Size))
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	if !slices.Contains(m.o.methods, r.Method) {
		h.next.ServeHTTP(w, r)
		return
	}
	values := r.Header[m.o.header]
	if len(values) == 0 {
		if m.o.required {
			m.refuse(w, r, http.StatusBadRequest, TypeKeyMissing, m.o.header+" is missing",
				"This operation requires an "+m.o.header+" header.", fmt.Errorf("%w (%s)", ErrKeyMissing, m.o.header))
			return
		}
		h.next.ServeHTTP(w, r)
		return
	}
	key, err := m.parseKey(values)
	if err != nil {
		m.refuse(w, r, http.StatusBadRequest, TypeKeyInvalid, m.o.header+" is invalid", detail(err), err)
		return
	}
	body, err := m.readBody(r)
	if err != nil {
		if errors.Is(err, ErrBodyTooLarge) {
			m.refuse(w, r, http.StatusRequestEntityTooLarge, TypeBodyTooLarge, "Request body too large", detail(err), err)
		} else {
			m.refuse(w, r, http.StatusBadRequest, TypeBodyUnreadable, "Request body unreadable", "The request body could not be read.", err)
		}
		return
	}
	r.Body = newBody(body)
	scope := ""
	if m.o.scope != nil {
		scope = m.o.scope(r)
	}

	var (
		ran bool
		rec recorder
	)
	res, err := m.g.Do(r.Context(), guardKey(m.guardMaxKeyLen, scope, key), m.o.fingerprint(r, body), func(ctx context.Context) ([]byte, error) {
		ran = true
		rec = recorder{rw: w, max: m.o.maxCachedBytes}
		h.next.ServeHTTP(&rec, r.WithContext(ctx))
		return rec.finish(m.o.cacheServerErrors)
	})
	switch {
	case ran:
		// The handler answered the client; only a store that did not take
		// the outcome is worth a word.
		if _, ok := errors.AsType[*errNotStored](err); err != nil && !ok {
			m.o.logger.WarnContext(r.Context(), "idemhttp: response served, outcome not stored",
				slog.String("key", key), slog.String("scope", scope), slog.Any("error", err))
		}
	case err == nil:
		m.replay(w, r, key, res.Value)
	default:
		h.failed(w, r, err, body)
	}
}

// parseKey returns the key of the header's values, or an error wrapping
// ErrKeyInvalid.
func (m *middleware) parseKey(values []string) (string, error) {
	if len(values) > 1 {
		return "", fmt.Errorf("%w: the %s header is sent %d times; send it once", ErrKeyInvalid, m.o.header, len(values))
	}
	key, err := ParseKey(values[0], m.o.syntax)
	if err != nil {
		return "", err
	}
	if len(key) > m.o.maxKeyLen {
		return "", fmt.Errorf("%w: the key is %d bytes long, longer than %d", ErrKeyInvalid, len(key), m.o.maxKeyLen)
	}
	if m.o.validateKey != nil {
		if err := m.o.validateKey(key); err != nil {
			return "", fmt.Errorf("%w: %w", ErrKeyInvalid, err)
		}
	}
	return key, nil
}

// readBody reads the whole request body, up to the cap.
func (m *middleware) readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	max := m.o.maxBodyBytes
	var (
		body []byte
		err  error
	)
	switch cl := r.ContentLength; {
	case cl > max:
		return nil, fmt.Errorf("%w: the body is longer than %d bytes", ErrBodyTooLarge, max)
	case cl >= 0:
		// net/http holds the body to its Content-Length: read it at once.
		body = make([]byte, cl)
		if _, err = io.ReadFull(r.Body, body); err == nil {
			var one [1]byte
			if n, _ := r.Body.Read(one[:]); n > 0 {
				err = fmt.Errorf("longer than its Content-Length %d", cl)
			}
		}
	default:
		body, err = io.ReadAll(io.LimitReader(r.Body, max+1))
		if err == nil && int64(len(body)) > max {
			return nil, fmt.Errorf("%w: the body is longer than %d bytes", ErrBodyTooLarge, max)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBodyUnreadable, err)
	}
	return body, nil
}

// bodyReader gives the body back to the handler, in one allocation.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

func newBody(b []byte) *bodyReader {
	r := &bodyReader{}
	r.Reset(b)
	return r
}

// replay writes a stored response with Idempotent-Replayed: true. Fields
// the handler's own middleware set on w are kept unless the stored
// response has them too.
func (m *middleware) replay(w http.ResponseWriter, r *http.Request, key string, value []byte) {
	status, body, err := decodeInto(value, w.Header())
	if err != nil {
		m.o.logger.ErrorContext(r.Context(), "idemhttp: stored response undecodable",
			slog.String("key", key), slog.Any("error", err))
		m.refuse(w, r, http.StatusInternalServerError, TypeStoredResponse, "Stored response unavailable",
			"The response stored for this key cannot be replayed.", err)
		return
	}
	w.Header().Set(ReplayedHeader, "true")
	w.WriteHeader(status)
	w.Write(body)
}

// failed answers a request the Guard did not run the handler for.
func (h *handler) failed(w http.ResponseWriter, r *http.Request, err error, body []byte) {
	m := h.m
	switch {
	case errors.Is(err, idem.ErrKeyReused):
		m.refuse(w, r, http.StatusUnprocessableEntity, TypeKeyReused, m.o.header+" is already used",
			"This "+m.o.header+" was used with a different request; use a new key for a new request.", err)
	case errors.Is(err, idem.ErrInProgress):
		m.refuseRetry(w, r, http.StatusConflict, TypeInProgress, "A request is outstanding for this "+m.o.header,
			"A request with the same "+m.o.header+" is being processed; retry later with the same key.", err)
	case errors.Is(err, idem.ErrTooManyAttempts):
		m.refuse(w, r, http.StatusUnprocessableEntity, TypeTooManyAttempts, m.o.header+" is exhausted",
			"Requests with this "+m.o.header+" failed too many times; it will not be processed again.", err)
	case errors.Is(err, idem.ErrInvalidKey):
		m.refuse(w, r, http.StatusBadRequest, TypeKeyInvalid, m.o.header+" is invalid", "The key is not accepted.", err)
	case errors.Is(err, idem.ErrStoreUnavailable) && m.o.failOpen:
		m.o.logger.WarnContext(r.Context(), "idemhttp: store unavailable, running the handler without idempotency (fail open)",
			slog.Any("error", err))
		r.Body = newBody(body)
		h.next.ServeHTTP(w, r)
	case errors.Is(err, idem.ErrStoreUnavailable):
		m.o.logger.WarnContext(r.Context(), "idemhttp: store unavailable", slog.Any("error", err))
		m.refuseRetry(w, r, http.StatusServiceUnavailable, TypeStoreUnavailable, "Service Unavailable",
			"Idempotency cannot be ensured right now; retry later with the same key.", err)
	case r.Context().Err() != nil:
		// The client is gone or the server gave up while the key was being
		// claimed or waited for; the answer is likely never read.
		m.refuseRetry(w, r, http.StatusServiceUnavailable, "", "Service Unavailable",
			"The request ended before the key's outcome was known; retry with the same key.", err)
	default:
		m.o.logger.ErrorContext(r.Context(), "idemhttp: unexpected error", slog.Any("error", err))
		m.refuse(w, r, http.StatusInternalServerError, "", "Internal Server Error", "", err)
	}
}

// detail turns one of the middleware's errors into a problem's detail.
func detail(err error) string {
	s := strings.TrimPrefix(err.Error(), "idemhttp: ")
	if s == "" {
		return ""
	}
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

func (m *middleware) refuse(w http.ResponseWriter, r *http.Request, status int, typ, title, detail string, err error) {
	m.o.errorHandler(w, r, &Error{Status: status, Type: typ, Title: title, Detail: detail, Err: err})
}

func (m *middleware) refuseRetry(w http.ResponseWriter, r *http.Request, status int, typ, title, detail string, err error) {
	m.o.errorHandler(w, r, &Error{Status: status, Type: typ, Title: title, Detail: detail, RetryAfter: m.o.retryAfter, Err: err})
}
