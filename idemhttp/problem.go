package idemhttp

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// Sentinel errors of the middleware, found with [errors.Is] in the error an
// [ErrorHandler] gets. The Guard's own (idem.ErrKeyReused,
// idem.ErrInProgress, idem.ErrStoreUnavailable, idem.ErrTooManyAttempts,
// idem.ErrInvalidKey) reach it the same way.
var (
	// ErrKeyMissing: the request has no idempotency key and [WithRequired]
	// is set. 400.
	ErrKeyMissing = errors.New("idemhttp: idempotency key missing")
	// ErrKeyInvalid: the key header is empty, repeated, malformed, too long
	// or refused by the Guard's Config.ValidateKey. 400.
	ErrKeyInvalid = errors.New("idemhttp: invalid idempotency key")
	// ErrBodyTooLarge: the request body is longer than [WithMaxBodyBytes]. 413.
	ErrBodyTooLarge = errors.New("idemhttp: request body too large")
	// ErrBodyUnreadable: reading the request body failed. 400.
	ErrBodyUnreadable = errors.New("idemhttp: request body unreadable")
	// ErrStoredResponse: the stored response cannot be decoded (see
	// [DecodeResponse]). 500.
	ErrStoredResponse = errors.New("idemhttp: stored response undecodable")
)

// Problem types: URIs of the documentation of each refusal, sent as the
// "type" member of the problem details (RFC 9457) by [DefaultErrorHandler].
const (
	TypeKeyMissing       = "https://pkg.go.dev/github.com/idemgo/idem/idemhttp#ErrKeyMissing"
	TypeKeyInvalid       = "https://pkg.go.dev/github.com/idemgo/idem/idemhttp#ErrKeyInvalid"
	TypeBodyTooLarge     = "https://pkg.go.dev/github.com/idemgo/idem/idemhttp#ErrBodyTooLarge"
	TypeBodyUnreadable   = "https://pkg.go.dev/github.com/idemgo/idem/idemhttp#ErrBodyUnreadable"
	TypeKeyReused        = "https://pkg.go.dev/github.com/idemgo/idem#ErrKeyReused"
	TypeInProgress       = "https://pkg.go.dev/github.com/idemgo/idem#ErrInProgress"
	TypeTooManyAttempts  = "https://pkg.go.dev/github.com/idemgo/idem#ErrTooManyAttempts"
	TypeStoreUnavailable = "https://pkg.go.dev/github.com/idemgo/idem#ErrStoreUnavailable"
	TypeStoredResponse   = "https://pkg.go.dev/github.com/idemgo/idem/idemhttp#ErrStoredResponse"
	// TypeStoredFailure: the key's first request failed permanently (see
	// idem.PermanentError) and the failure is what the store keeps. 422.
	TypeStoredFailure = "https://pkg.go.dev/github.com/idemgo/idem#PermanentError"
	// TypeResponseNotKept: the key's first request was processed, but its
	// response was too large to keep. The replay has its status (422 when
	// that is unknown).
	TypeResponseNotKept = "https://pkg.go.dev/github.com/idemgo/idem#ErrValueTooLarge"
)

// Error is what the middleware hands to its [ErrorHandler] when it answers
// a request itself instead of running or replaying the handler. Its fields
// are what [DefaultErrorHandler] sends; Err is for logs and [errors.Is].
type Error struct {
	// Status is the HTTP status to answer with.
	Status int
	// Type, Title and Detail are the problem details (RFC 9457). Detail is
	// safe to show the client: it never holds a store's error.
	Type, Title, Detail string
	// RetryAfter, when positive, is sent as Retry-After (409 and 503).
	RetryAfter time.Duration
	// Err is the cause: one of the sentinels, wrapped with detail.
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ErrorHandler answers a request the middleware refuses. err is an *[Error].
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

// DefaultErrorHandler is the default [ErrorHandler]: it sends err's status,
// Retry-After when set, and its problem details as application/problem+json
// (see [WriteProblem]). An err that is not an *[Error] gets a bare 500.
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	e, ok := errors.AsType[*Error](err)
	if !ok {
		e = &Error{Status: http.StatusInternalServerError, Title: "Internal Server Error", Err: err}
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	}
	WriteProblem(w, Problem{Type: e.Type, Title: e.Title, Status: e.Status, Detail: e.Detail})
}

// Problem is a problem details object (RFC 9457).
type Problem struct {
	Type   string `json:"type,omitempty"`
	Title  string `json:"title,omitempty"`
	Status int    `json:"status,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// WriteProblem writes p as the response: status p.Status (500 if unset),
// Content-Type application/problem+json and Cache-Control no-store, so
// that no cache keeps a refusal that a retry may not get.
func WriteProblem(w http.ResponseWriter, p Problem) {
	if p.Status < 100 || p.Status > 999 {
		p.Status = http.StatusInternalServerError
	}
	body, err := json.Marshal(p)
	if err != nil { // unreachable: strings and an int always marshal
		body = []byte(`{"status":500}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	w.Write(body)
}
