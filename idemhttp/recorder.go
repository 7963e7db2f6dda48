package idemhttp

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
)

// recorder passes a handler's response through to the client as the
// handler writes it, and keeps a copy in the stored value's format (the
// head, then the body) for as long as the body fits the cache cap.
//
// Once a write to the client fails (the client went away), the recorder
// keeps taking the handler's writes and reports them as successful while
// it is still keeping a copy: the handler then finishes its response and
// the whole response is stored, so the client's retry gets it. Past the
// cap nothing is stored and the write error is reported as usual.
type recorder struct {
	rw         http.ResponseWriter
	max        int    // body bytes kept at most
	buf        []byte // the encoded head, then the body so far
	head       int    // len of the head in buf
	status     int    // the final status once written, else 0
	overflow   bool   // the body outgrew max: buf was dropped
	unstorable string // why the response cannot be replayed (hijacked)
	clientErr  error  // the first failed write to the client
}

// errNotStored is returned by the Guard's fn for a response that is served
// but not stored: the Guard then releases the key.
type errNotStored struct{ reason string }

func (e *errNotStored) Error() string { return "idemhttp: response not stored: " + e.reason }

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
	w.buf = appendHead(make([]byte, 0, headSize(h)+min(w.max, 512)), code, h)
	w.head = len(w.buf)
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
			w.overflow, w.buf = true, nil
			kept = false
		} else {
			w.buf = append(w.buf, p...)
		}
	}
	if w.clientErr != nil {
		if kept {
			return len(p), nil
		}
		return 0, w.clientErr
	}
	n, err := w.rw.Write(p)
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

// finish returns the stored value of the response once the handler has
// returned, or an *errNotStored saying why there is none.
func (w *recorder) finish(cacheServerErrors bool) ([]byte, error) {
	if w.status == 0 {
		// The handler wrote nothing: net/http sends 200 and the header.
		w.writeHead(http.StatusOK)
	}
	switch {
	case w.unstorable != "":
		return nil, &errNotStored{w.unstorable}
	case w.overflow:
		return nil, &errNotStored{fmt.Sprintf("the body is longer than %d bytes", w.max)}
	case w.status >= 500 && !cacheServerErrors:
		return nil, &errNotStored{fmt.Sprintf("server error %d", w.status)}
	case w.status == http.StatusRequestTimeout || w.status == http.StatusTooEarly || w.status == http.StatusTooManyRequests:
		// These tell the client to retry: storing them would refuse the
		// retry for as long as the record is kept.
		return nil, &errNotStored{fmt.Sprintf("status %d asks for a retry", w.status)}
	}
	return w.buf, nil
}
