package idemhttp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/idemgo/idem/internal/adapter"
)

// recorder passes a handler's response through to the client as the
// handler writes it, and keeps a copy in the stored value's format (the
// head, then the body) for as long as the body fits the cap.
//
// Once a write to the client fails (the client went away), the recorder
// keeps taking the handler's writes and reports them as successful: the
// handler then finishes its response and the response is stored, so the
// client's retry gets it. Past the cap the body is no longer kept, and the
// write error is reported as usual.
type recorder struct {
	rw         http.ResponseWriter
	m          *middleware
	preset     http.Header // fields set before the middleware ran: stored only if the handler changed them
	max        int         // body bytes kept at most
	buf        []byte      // the encoded head, then the body so far
	head       int         // len of the head in buf
	status     int         // the final status once written, else 0
	overflow   bool        // the body outgrew max: buf holds the head only
	size       int         // the body's length, kept or not
	unstorable string      // why the response cannot be replayed (hijacked)
	clientErr  error       // the first failed write to the client
}

func (w *recorder) Header() http.Header { return w.rw.Header() }

func (w *recorder) WriteHeader(code int) {
	if w.status != 0 || (code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols) {
		// Superfluous (net/http logs it) or informational (103 Early
		// Hints): passed on, not the final status.
		w.rw.WriteHeader(code)
		return
	}
	w.rw.WriteHeader(code) // panics on an invalid code, before it is kept
	w.writeHead(code)
	if code == http.StatusSwitchingProtocols {
		w.unstorable = "the protocol was switched (101)"
	}
}

func (w *recorder) writeHead(code int) {
	h := w.rw.Header()
	w.status = code
	w.buf = appendHead(make([]byte, 0, headSize(h)+min(w.max, 512)), responseVersion, code, h, w.skip)
	w.head = len(w.buf)
}

// skip reports whether the field name is left out of the stored response:
// set before the middleware ran and left as it was by the handler (an
// outer middleware's, for this request only), or one of the unstored
// fields (per caller, like Set-Cookie). A field the handler changed after
// an outer middleware set it (Content-Type, Cache-Control) is the
// handler's answer, and is stored.
func (w *recorder) skip(name string) bool {
	if before, ok := w.preset[name]; ok && slices.Equal(before, w.rw.Header()[name]) {
		return true
	}
	for _, f := range w.m.o.unstored {
		if strings.EqualFold(f, name) {
			return true
		}
	}
	return false
}

// keeping reports whether the body is still being copied.
func (w *recorder) keeping() bool { return !w.overflow && w.unstorable == "" }

func (w *recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	kept := w.keeping()
	if kept {
		if len(w.buf)-w.head+len(p) > w.max {
			w.overflow, w.buf = true, w.buf[:w.head:w.head]
			kept = false
		} else {
			w.buf = append(w.buf, p...)
		}
	}
	if w.clientErr != nil {
		w.size += len(p)
		if kept {
			return len(p), nil
		}
		return 0, w.clientErr
	}
	n, err := w.rw.Write(p)
	w.size += n
	switch {
	case err == nil:
	case errors.Is(err, http.ErrBodyNotAllowed):
		if kept {
			w.buf = w.buf[:len(w.buf)-len(p)] // the client did not get it either
		}
	default:
		w.clientErr = err
		if kept {
			return len(p), nil
		}
	}
	return n, err
}

// FlushError flushes through [http.ResponseController], so it works for any
// writer the recorder wraps; the controller finds it on the recorder.
func (w *recorder) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.clientErr != nil {
		if w.keeping() {
			return nil
		}
		return w.clientErr
	}
	err := http.NewResponseController(w.rw).Flush()
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		w.clientErr = err
		if w.keeping() {
			return nil
		}
	}
	return err
}

// Flush implements [http.Flusher].
func (w *recorder) Flush() { _ = w.FlushError() }

// Hijack implements [http.Hijacker] when the wrapped writer supports it. A
// hijacked response is not stored: the key is released.
func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.rw).Hijack()
	if err == nil {
		w.unstorable = "the connection was hijacked"
	}
	return c, brw, err
}

// Unwrap returns the wrapped writer, for [http.ResponseController].
func (w *recorder) Unwrap() http.ResponseWriter { return w.rw }

// finish returns the value to store for the response once the handler has
// returned under ctx, or an *adapter.NotStored saying why there is none
// (see the status table in the package documentation). omitted reports a
// response stored without its body, which was too large to keep.
func (w *recorder) finish(ctx context.Context, limit int) (value []byte, omitted bool, err error) {
	if w.status == 0 {
		if ctx.Err() != nil {
			// The request ended (client gone, lease lost, Guard closed)
			// and the handler answered nothing: not an answer to keep.
			return nil, false, &adapter.NotStored{Reason: "the request ended before the handler answered", Err: context.Cause(ctx)}
		}
		w.writeHead(http.StatusOK) // net/http sends 200 and the header
	}
	switch {
	case w.unstorable != "":
		return nil, false, &adapter.NotStored{Reason: w.unstorable}
	case !w.m.storedStatus(w.status):
		return nil, false, &adapter.NotStored{Reason: fmt.Sprintf("status %d is not an answer to keep", w.status)}
	case w.overflow || (limit > 0 && len(w.buf) > limit):
		return w.headOnly(limit), true, nil
	}
	return w.buf, false, nil
}

// headOnly returns the response stored without its body: the status and
// the kept fields, less those that describe the body (Content-*, ETag,
// Last-Modified), or the status alone when even they outgrow limit.
func (w *recorder) headOnly(limit int) []byte {
	h := make(http.Header)
	if _, _, _, err := decodeInto(w.buf[:w.head], h); err != nil { // unreachable: the recorder wrote it
		h = nil
	}
	b := appendHead(nil, responseVersionHead, w.status, h, describesBody)
	if limit > 0 && len(b) > limit {
		b = appendHead(b[:0], responseVersionHead, w.status, nil, nil)
	}
	return b
}

// describesBody reports whether the field describes a response's body,
// which a replay of a response stored without it does not have.
func describesBody(name string) bool {
	return len(name) >= len("Content-") && strings.EqualFold(name[:len("Content-")], "Content-") ||
		strings.EqualFold(name, "Etag") || strings.EqualFold(name, "Last-Modified")
}
