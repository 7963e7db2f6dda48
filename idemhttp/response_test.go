package idemhttp_test

import (
	"bytes"
	"errors"
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/idemgo/idem/idemhttp"
)

func TestResponseRoundTrip(t *testing.T) {
	in := &idemhttp.Response{
		Status: http.StatusCreated,
		Header: http.Header{
			"Content-Type":        {"application/json"},
			"Set-Cookie":          {"a=1", "b=2"},
			"X-Empty":             {},
			"X-Blank":             {""},
			"Location":            {"/orders/1"},
			"Date":                {"Mon, 02 Jan 2006 15:04:05 GMT"},
			"Connection":          {"close, X-Conn-Only"},
			"X-Conn-Only":         {"dropped"},
			"Keep-Alive":          {"timeout=5"},
			"Proxy-Connection":    {"keep-alive"},
			"Proxy-Authenticate":  {"Basic"},
			"Te":                  {"trailers"},
			"Trailer":             {"X-Sum"},
			"Transfer-Encoding":   {"chunked"},
			"Upgrade":             {"h2c"},
			"Idempotent-Replayed": {"true"},
			"Trailer:X-Sum":       {"1"},
			"Bad Name":            {"x"},
			"X-Newline":           {"a\r\nb"},
			"X-Nul":               {"a\x00b", "ok"},
		},
		Body: []byte(`{"id":1}`),
	}
	out, err := idemhttp.DecodeResponse(idemhttp.EncodeResponse(in))
	if err != nil {
		t.Fatalf("DecodeResponse(EncodeResponse(r)): %v", err)
	}
	want := http.Header{
		"Content-Type": {"application/json"},
		"Set-Cookie":   {"a=1", "b=2"},
		"X-Empty":      {},
		"X-Blank":      {""},
		"Location":     {"/orders/1"},
		"X-Newline":    {"a  b"},
		"X-Nul":        {"ok"},
	}
	if out.Status != in.Status || !bytes.Equal(out.Body, in.Body) ||
		!maps.EqualFunc(out.Header, want, func(a, b []string) bool { return slices.Equal(a, b) }) {
		t.Fatalf("round trip = %d %v %q\nwant %d %v %q", out.Status, out.Header, out.Body, in.Status, want, in.Body)
	}
}

func TestDecodeResponseRefusesBadInput(t *testing.T) {
	good := idemhttp.EncodeResponse(&idemhttp.Response{Status: 200, Header: http.Header{"A": {"1"}, "B": {"2"}}, Body: []byte("body")})
	bad := map[string][]byte{
		"empty":           nil,
		"unknown version": append([]byte{2}, good[1:]...),
		"status 99":       {1, 99, 0},
		"status 1000":     {1, 0xe8, 0x07, 0},
		"truncated count": {1, 200, 1},
		"count too large": {1, 200, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad name":        {1, 200, 1, 3, 'a', ' ', 'b', 0},
		"unsorted":        {1, 200, 2, 1, 'b', 0, 1, 'a', 0},
		"duplicate":       {1, 200, 2, 1, 'a', 0, 1, 'a', 0},
		"CR in value":     {1, 200, 1, 1, 'a', 1, 2, 'x', '\r'},
		"no values count": {1, 200, 1, 1, 'a'},
		"hop-by-hop":      {1, 200, 1, 7, 'U', 'p', 'g', 'r', 'a', 'd', 'e', 0},
		"overlong":        {1, 0xc8, 0x81, 0x00, 0},
	}
	for i := range len(good) - len("body") {
		bad["cut at "+string(rune('0'+i))] = good[:i]
	}
	for name, b := range bad {
		if r, err := idemhttp.DecodeResponse(b); err == nil || !errors.Is(err, idemhttp.ErrStoredResponse) {
			t.Errorf("%s: DecodeResponse(%v) = %+v, %v; want an error wrapping ErrStoredResponse", name, b, r, err)
		}
	}
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add(idemhttp.EncodeResponse(&idemhttp.Response{Status: 201, Header: http.Header{"A": {"1", "2"}, "X": nil}, Body: []byte("b")}))
	f.Add([]byte{1, 200, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := idemhttp.DecodeResponse(b)
		if err != nil {
			if !errors.Is(err, idemhttp.ErrStoredResponse) {
				t.Fatalf("error %v does not wrap ErrStoredResponse", err)
			}
			return
		}
		// What decodes is replayable and re-encodes to the same bytes.
		if r.Status < 200 || r.Status > 999 {
			t.Fatalf("decoded status %d", r.Status)
		}
		if again := idemhttp.EncodeResponse(r); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding %v gives %v", b, again)
		}
	})
}
