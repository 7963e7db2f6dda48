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
	"github.com/idemgo/idem/internal/adapter"
)

// New returns the middleware that makes the covered requests (POST and
// PATCH by default) idempotent with g, keyed by the Idempotency-Key header
// and scoped by [WithScope]. See the package documentation for what it
// answers in every case.
//
// Waiting for a concurrent request's outcome is the Guard's: with
// Config.Wait set, a request whose key is in progress waits up to that long
// for the outcome and replays it, else it gets 409 at once. The Guard keeps
// its other settings too: lease, retention, MaxAttempts, the local cache,
// the key's length and format (Config.MaxKeyLen, Config.ValidateKey) and
// fail-open (Config.FailOpen: the handler runs unguarded when the store
// cannot be reached).
//
// New fails when g is nil, an option is invalid, or neither [WithScope]
// nor [WithSharedScope] is given.
func New(g *idem.Guard, opts ...Option) (func(http.Handler) http.Handler, error) {
	m := &middleware{}
	if err := m.o.build(g, opts); err != nil {
		return nil, err
	}
	m.limit = m.o.ValueLimit()
	m.maxBody = m.o.maxCachedBytes
	if m.limit > 0 {
		m.maxBody = min(m.maxBody, m.limit)
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			next = http.NotFoundHandler()
		}
		return &handler{m: m, next: next}
	}, nil
}

type middleware struct {
	o       options
	limit   int // the longest value the store keeps, 0 if it does not say
	maxBody int // the longest response body kept: WithMaxCachedBytes, at most limit
}

// storedStatus reports whether a response of status is an answer to
// store: not a server error (unless WithCacheServerErrors), and not a
// status that asks the client to retry or says it is gone (408, 425, 429,
// 499). Storing those would refuse the retry for as long as the record is
// kept.
func (m *middleware) storedStatus(status int) bool {
	switch {
	case status >= 500:
		return m.o.cacheServerErrors
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests, status == statusClientClosed:
		return false
	}
	return true
}

// statusClientClosed is nginx's 499 Client Closed Request, which handlers
// write when the client went away.
const statusClientClosed = 499

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
	key, err := m.o.Key(r.Header[m.o.header], m.parseKey)
	switch {
	case errors.Is(err, adapter.ErrKeyMissing):
		m.refuse(w, r, http.StatusBadRequest, TypeKeyMissing, m.o.header+" is missing",
			"This operation requires an "+m.o.header+" header.", fmt.Errorf("%w (%s)", ErrKeyMissing, m.o.header))
		return
	case err != nil:
		if !errors.Is(err, ErrKeyInvalid) {
			err = fmt.Errorf("%w: %w", ErrKeyInvalid, err)
		}
		m.refuse(w, r, http.StatusBadRequest, TypeKeyInvalid, m.o.header+" is invalid", detail(err), err)
		return
	case key == "":
		h.next.ServeHTTP(w, r)
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
	scope, payload, err := m.read(r, body)
	if err != nil {
		m.refuse(w, r, http.StatusInternalServerError, "", "Internal Server Error", "", err)
		return
	}

	var (
		ran bool
		rec recorder
	)
	res, err := m.o.Guard().DoScoped(r.Context(), scope, key, payload, func(ctx context.Context) ([]byte, error) {
		ran = true
		rec = recorder{rw: w, m: m, preset: presetFields(w.Header()), max: m.maxBody}
		h.next.ServeHTTP(&rec, r.WithContext(ctx))
		v, omitted, err := rec.finish(ctx, m.limit)
		if omitted {
			m.o.TooLarge(ctx, scope, key, rec.size, fmt.Errorf("%w: a %d response with a body of %d bytes (kept up to %d, store limit %d); stored without its body",
				idem.ErrValueTooLarge, rec.status, rec.size, m.maxBody, m.limit))
		}
		return v, err
	})
	switch {
	case ran:
		// The handler answered the client; only an outcome the store did
		// not take is worth a word.
		m.o.Ran(r.Context(), err, slog.String("key", key), slog.String("scope", scope))
	case err == nil:
		m.replay(w, r, key, res.Value)
	default:
		m.failed(w, r, err)
	}
}

// presetFields returns a copy of the fields set on h before the handler
// ran, by an outer middleware for this request; nil when there are none.
func presetFields(h http.Header) http.Header {
	if len(h) == 0 {
		return nil
	}
	return h.Clone()
}

func (m *middleware) parseKey(v string) (string, error) { return ParseKey(v, m.o.syntax) }

// read returns r's scope and payload, or the panic of the scope or
// fingerprint function, logged: a 500 for that request alone.
func (m *middleware) read(r *http.Request, body []byte) (scope string, payload []byte, err error) {
	if err := m.o.Protect(r.Context(), "the scope function (WithScope)", func() { scope = m.o.Scope(r) }); err != nil {
		return "", nil, err
	}
	err = m.o.Protect(r.Context(), "the fingerprint function (WithFingerprint)", func() { payload = m.o.fingerprint(r, body) })
	return scope, payload, err
}

// readBody reads the whole request body, up to the cap. The buffer grows
// as bytes arrive, doubling from at most 4 KiB, never ahead of them: a
// client that announces a large Content-Length and sends slowly, or never,
// holds no more memory than it sent.
func (m *middleware) readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	limit, cl := m.o.maxBodyBytes, r.ContentLength
	if cl > limit {
		return nil, fmt.Errorf("%w: the body is longer than %d bytes", ErrBodyTooLarge, limit)
	}
	size := int64(512)
	if cl >= 0 {
		size = min(cl+1, 4<<10) // room to see the end without growing
	}
	body := make([]byte, 0, size)
	for {
		if len(body) == cap(body) {
			body = append(make([]byte, 0, min(2*int64(cap(body)), limit+1)), body...)
		}
		n, err := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		switch {
		case int64(len(body)) > limit:
			return nil, fmt.Errorf("%w: the body is longer than %d bytes", ErrBodyTooLarge, limit)
		case err == io.EOF && cl >= 0 && int64(len(body)) != cl:
			return nil, fmt.Errorf("%w: %d bytes, not its Content-Length %d", ErrBodyUnreadable, len(body), cl)
		case err == io.EOF:
			return body, nil
		case err != nil:
			return nil, fmt.Errorf("%w: %w", ErrBodyUnreadable, err)
		}
	}
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
// already set on w (by an outer handler, for this request) are kept, but
// for those the stored response holds: the handler had changed them, and
// the replay answers as the first response did. A response stored without its
// body is replayed with its status, its kept fields and a problem saying
// the body was too large to keep, through the error handler.
func (m *middleware) replay(w http.ResponseWriter, r *http.Request, key string, value []byte) {
	status, body, omitted, err := decodeInto(value, w.Header())
	if err != nil {
		m.o.Logger().ErrorContext(r.Context(), "idemhttp: stored response undecodable",
			slog.String("key", key), slog.Any("error", err))
		m.refuse(w, r, http.StatusInternalServerError, TypeStoredResponse, "Stored response unavailable",
			"The response stored for this key cannot be replayed.", err)
		return
	}
	w.Header().Set(ReplayedHeader, "true")
	if omitted {
		m.o.errorHandler(w, r, &Error{Status: status, Type: TypeResponseNotKept, Title: "Response not kept",
			Detail: m.named(fmt.Sprintf("The first request with this Idempotency-Key was processed and answered %d, "+
				"but its response body was too large to keep; it is not processed again.", status)),
			Err: fmt.Errorf("%w: the response was stored without its body", idem.ErrValueTooLarge)})
		return
	}
	w.WriteHeader(status)
	w.Write(body)
}

// refusal is the answer to a request the Guard did not run the handler
// for, by the class of the Guard's error. Its title and detail name the
// default header, replaced by the configured one.
type refusal struct {
	status             int
	typ, title, detail string
	retryAfter         bool
	logLevel           slog.Level
	log                bool
}

var refusals = map[adapter.Class]refusal{
	adapter.KeyReused: {status: http.StatusUnprocessableEntity, typ: TypeKeyReused, title: "Idempotency-Key is already used",
		detail: "This Idempotency-Key was used with a different request; use a new key for a new request."},
	adapter.InProgress: {status: http.StatusConflict, typ: TypeInProgress, title: "A request is outstanding for this Idempotency-Key", retryAfter: true,
		detail: "A request with the same Idempotency-Key is being processed; retry later with the same key."},
	adapter.TooManyAttempts: {status: http.StatusUnprocessableEntity, typ: TypeTooManyAttempts, title: "Idempotency-Key is exhausted",
		detail: "Requests with this Idempotency-Key failed too many times; it will not be processed again."},
	adapter.StoredFailure: {status: http.StatusUnprocessableEntity, typ: TypeStoredFailure, title: "Request failed permanently",
		detail: "The first request with this Idempotency-Key failed permanently; it will not be processed again. Use a new key for a new request."},
	adapter.TooLarge: {status: http.StatusUnprocessableEntity, typ: TypeResponseNotKept, title: "Response not kept",
		detail: "The first request with this Idempotency-Key was processed, but its response was too large to keep; it will not be processed again."},
	adapter.InvalidKey: {status: http.StatusBadRequest, typ: TypeKeyInvalid, title: "Idempotency-Key is invalid",
		detail: "The key, or the scope of the request, is not accepted."},
	adapter.Unavailable: {status: http.StatusServiceUnavailable, typ: TypeStoreUnavailable, title: "Service Unavailable", retryAfter: true,
		detail: "Idempotency cannot be ensured right now; retry later with the same key.", log: true, logLevel: slog.LevelWarn},
	// The client is gone or the server gave up while the key was claimed
	// or waited for; the answer is likely never read.
	adapter.Ended: {status: http.StatusServiceUnavailable, title: "Service Unavailable", retryAfter: true,
		detail: "The request ended before the key's outcome was known; retry with the same key."},
	adapter.Retryable: {status: http.StatusInternalServerError, title: "Internal Server Error", log: true, logLevel: slog.LevelError},
	// The store answered and refuses this key alone: not an outage (no
	// Retry-After), and nothing the client can mend.
	adapter.Refused: {status: http.StatusInternalServerError, title: "Internal Server Error", log: true, logLevel: slog.LevelError},
}

// failed answers a request the Guard did not run the handler for.
func (m *middleware) failed(w http.ResponseWriter, r *http.Request, err error) {
	c := adapter.Classify(err)
	if c == adapter.Retryable && r.Context().Err() != nil {
		c = adapter.Ended
	}
	f, ok := refusals[c]
	if !ok {
		f = refusals[adapter.Retryable]
	}
	if f.log {
		m.o.Logger().Log(r.Context(), f.logLevel, "idemhttp: "+c.String(), slog.Any("error", err))
	}
	e := &Error{Status: f.status, Type: f.typ, Title: m.named(f.title), Detail: m.named(f.detail), Err: err}
	if f.retryAfter {
		e.RetryAfter = m.o.retryAfter
	}
	m.o.errorHandler(w, r, e)
}

// named returns s with the default header's name replaced by the
// configured one.
func (m *middleware) named(s string) string {
	if m.o.header == DefaultHeader {
		return s
	}
	return strings.ReplaceAll(s, DefaultHeader, m.o.header)
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
