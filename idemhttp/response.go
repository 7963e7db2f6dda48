package idemhttp

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Response is an HTTP response as the middleware stores and replays it.
type Response struct {
	// Status is the final status code, 200 to 999.
	Status int
	// Header holds the response's end-to-end header fields: hop-by-hop
	// fields and Date are not stored (see [EncodeResponse]).
	Header http.Header
	// Body is the response body.
	Body []byte
	// BodyOmitted marks a response stored without its body, which was too
	// large to keep (see [WithMaxCachedBytes]); Body is empty then. A
	// replay answers with Status, Header and a problem saying so.
	BodyOmitted bool
}

// The stored value's format; integers are uvarints:
//
//	version(=1) status nfields { len(name) name nvalues { len(value) value } } body…
//	version(=2) status nfields { len(name) name nvalues { len(value) value } }
//
// Field names are sorted; in version 1 the body runs to the end of the
// value. Version 2 is a response stored without its body: nothing follows
// the fields.
const (
	responseVersion     = 1
	responseVersionHead = 2
)

// EncodeResponse encodes r in the compact binary form the middleware stores
// as the Guard's value. It leaves out the hop-by-hop fields (Connection and
// the fields it names, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding,
// Upgrade), trailers, Date, [ReplayedHeader] and fields whose name is not a
// valid token; CR and LF in values become spaces, as net/http sends them.
func EncodeResponse(r *Response) []byte {
	if r.BodyOmitted {
		return appendHead(make([]byte, 0, headSize(r.Header)), responseVersionHead, r.Status, r.Header, nil)
	}
	b := appendHead(make([]byte, 0, headSize(r.Header)+len(r.Body)), responseVersion, r.Status, r.Header, nil)
	return append(b, r.Body...)
}

// DecodeResponse decodes a value written by [EncodeResponse]. The returned
// Body aliases b. It returns an error wrapping [ErrStoredResponse] for
// anything else and never panics: it accepts only what EncodeResponse
// writes, so what it returns is safe to replay (a status of 200 to 999,
// valid end-to-end field names, values without CR, LF or NUL).
func DecodeResponse(b []byte) (*Response, error) {
	r := &Response{Header: make(http.Header)}
	var err error
	r.Status, r.Body, r.BodyOmitted, err = decodeInto(b, r.Header)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// decodeInto decodes b, setting its fields in h (a stored field replaces
// one h has), and returns its status and body, and whether the body was omitted. It checks
// everything before it changes h: on an error h is as it was.
func decodeInto(b []byte, h http.Header) (status int, body []byte, omitted bool, err error) {
	// The first pass checks and allocates nothing; the second takes every
	// name and value from one string and one slice.
	d := decoder{b: b}
	status, nvalues := d.head()
	omitted = d.version == responseVersionHead
	if d.err == nil && omitted && len(d.b) > 0 {
		d.err = fmt.Errorf("%w: %d bytes after a response stored without its body", ErrStoredResponse, len(d.b))
	}
	if d.err != nil {
		return 0, nil, false, d.err
	}
	headLen := len(b) - len(d.b)
	d = decoder{b: b[:headLen]}
	d.fill(string(b[:headLen]), h, make([]string, nvalues))
	return status, b[headLen:], omitted, nil
}

type decoder struct {
	b       []byte
	version byte
	err     error
}

var errTruncated = fmt.Errorf("%w: truncated", ErrStoredResponse)

// head checks the head of the value and returns its status and how many
// values it holds; d.b is left at the body.
func (d *decoder) head() (status, nvalues int) {
	if d.version = d.byte(); d.err == nil && d.version != responseVersion && d.version != responseVersionHead {
		d.err = fmt.Errorf("%w: unknown format version %d", ErrStoredResponse, d.version)
	}
	st := d.uvarint()
	if d.err == nil && (st < 200 || st > 999) {
		d.err = fmt.Errorf("%w: status %d out of range", ErrStoredResponse, st)
	}
	nfields := d.count()
	var prev []byte
	for i := 0; i < nfields && d.err == nil; i++ {
		name := d.bytes()
		if d.err != nil {
			break
		}
		if !storedField(name) || (i > 0 && bytes.Compare(name, prev) <= 0) {
			d.err = fmt.Errorf("%w: invalid, unsorted or hop-by-hop field name %q", ErrStoredResponse, clip(string(name)))
			break
		}
		prev = name
		n := d.count()
		nvalues += n
		for j := 0; j < n && d.err == nil; j++ {
			if v := d.bytes(); bytes.ContainsAny(v, "\r\n\x00") {
				d.err = fmt.Errorf("%w: field %s holds a CR, LF or NUL", ErrStoredResponse, name)
			}
		}
	}
	return int(st), nvalues
}

// fill reads the head that head checked, s being its bytes as a string,
// into h, with the values in values.
func (d *decoder) fill(s string, h http.Header, values []string) {
	d.byte()
	d.uvarint()
	off := func() int { return len(s) - len(d.b) }
	for range d.count() {
		n := d.count()
		name := s[off() : off()+n]
		d.b = d.b[n:]
		nv := d.count()
		vs := values[:nv:nv]
		values = values[nv:]
		for j := range vs {
			n := d.count()
			vs[j] = s[off() : off()+n]
			d.b = d.b[n:]
		}
		h[name] = vs
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = cmp.Or(d.err, errTruncated)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errTruncated
		return 0
	}
	if n > 1 && d.b[n-1] == 0 {
		// A trailing zero group: an overlong form the encoder never writes.
		d.err = fmt.Errorf("%w: overlong integer", ErrStoredResponse)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a number of items that each take at least one byte, so it
// cannot exceed what is left: a corrupt count never allocates much.
func (d *decoder) count() int {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.b)) {
		d.err = errTruncated
		return 0
	}
	return int(v)
}

func (d *decoder) bytes() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

// headSize is an upper bound of the encoded head's size for h.
func headSize(h http.Header) int {
	n := 1 + 2*binary.MaxVarintLen64
	for k, vs := range h {
		n += 2*binary.MaxVarintLen64 + len(k)
		for _, v := range vs {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	return n
}

// appendHead appends version, status and the stored fields of h to b:
// the fields storedField accepts, less those that skip (when not nil)
// reports.
func appendHead(b []byte, version byte, status int, h http.Header, skip func(name string) bool) []byte {
	b = append(b, version)
	b = binary.AppendUvarint(b, uint64(status))
	names := make([]string, 0, len(h))
	var conn []string // fields named by Connection are hop-by-hop too
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			conn = append(conn, http.CanonicalHeaderKey(strings.TrimSpace(tok)))
		}
	}
	for name := range h {
		if storedField(name) && !slices.Contains(conn, http.CanonicalHeaderKey(name)) && (skip == nil || !skip(name)) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		vs := h[name]
		n := 0
		for _, v := range vs {
			if storedValue(v) {
				n++
			}
		}
		b = binary.AppendUvarint(b, uint64(n))
		for _, v := range vs {
			if !storedValue(v) {
				continue
			}
			b = binary.AppendUvarint(b, uint64(len(v)))
			start := len(b)
			b = append(b, v...)
			for i := start; i < len(b); i++ {
				if b[i] == '\r' || b[i] == '\n' {
					b[i] = ' '
				}
			}
		}
	}
	return b
}

// storedField reports whether the field name is stored: a valid token that
// is not hop-by-hop, Date or ReplayedHeader. Names compare without case.
func storedField[T string | []byte](name T) bool {
	if !isToken(name) {
		return false // net/http does not send it either
	}
	for _, f := range unstoredFields {
		if len(name) == len(f) && equalFold(name, f) {
			return false
		}
	}
	return len(name) < len("Proxy-") || !equalFold(name[:len("Proxy-")], "Proxy-")
}

var unstoredFields = [...]string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Date", ReplayedHeader}

// equalFold reports whether ASCII a and b are equal without case; len(a) must be len(b).
func equalFold[T string | []byte](a T, b string) bool {
	for i := range len(b) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func storedValue(v string) bool { return strings.IndexByte(v, 0) < 0 }
