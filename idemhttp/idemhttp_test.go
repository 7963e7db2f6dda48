package idemhttp_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/idemhttp/idemhttptest"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/adaptertest"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) { idemtest.Main(m, "github.com/idemgo/idem") }

func newStore(t testing.TB) *memstore.Store {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newGuard(t testing.TB, s storage.Store, cfg idem.Config) *idem.Guard {
	g, err := idem.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func TestMiddleware(t *testing.T) {
	s := newStore(t)
	idemhttptest.Run(t, func(t *testing.T) storage.Store { return s })
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	s := newStore(t)
	g := newGuard(t, s, idem.Config{})
	shared := idemhttp.WithSharedScope()
	for _, tc := range []struct {
		name string
		g    *idem.Guard
		opts []idemhttp.Option
		want string
	}{
		{"nil guard", nil, []idemhttp.Option{shared}, "Guard is nil"},
		{"no scope decision", g, nil, "WithSharedScope"},
		{"both scopes", g, []idemhttp.Option{shared, idemhttp.WithScope(func(*http.Request) string { return "" })}, "both"},
		{"header", g, []idemhttp.Option{shared, idemhttp.WithHeader("Bad Header")}, "WithHeader"},
		{"no methods", g, []idemhttp.Option{shared, idemhttp.WithMethods()}, "WithMethods"},
		{"bad method", g, []idemhttp.Option{shared, idemhttp.WithMethods("PO ST")}, "WithMethods"},
		{"body cap", g, []idemhttp.Option{shared, idemhttp.WithMaxBodyBytes(-1)}, "WithMaxBodyBytes"},
		{"cache cap", g, []idemhttp.Option{shared, idemhttp.WithMaxCachedBytes(0)}, "WithMaxCachedBytes"},
		{"retry after", g, []idemhttp.Option{shared, idemhttp.WithRetryAfter(0)}, "WithRetryAfter"},
		{"syntax", g, []idemhttp.Option{shared, idemhttp.WithSyntax(7)}, "WithSyntax"},
		{"nil fingerprint", g, []idemhttp.Option{shared, idemhttp.WithFingerprint(nil)}, "WithFingerprint"},
		{"nil scope", g, []idemhttp.Option{shared, idemhttp.WithScope(nil)}, "WithScope"},
		{"nil error handler", g, []idemhttp.Option{shared, idemhttp.WithErrorHandler(nil)}, "WithErrorHandler"},
		{"nil logger", g, []idemhttp.Option{shared, idemhttp.WithLogger(nil)}, "WithLogger"},
		{"nil option", g, []idemhttp.Option{shared, nil}, "nil Option"},
	} {
		mw, err := idemhttp.New(tc.g, tc.opts...)
		if err == nil || mw != nil {
			t.Errorf("%s: New = %v, want an error", tc.name, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "idemhttp: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q, want one starting with idemhttp: and naming %s", tc.name, err, tc.want)
		}
	}
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		in      string
		lenient string // "" when refused
		strict  string // "" when refused
	}{
		{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{" \t\"k\" \t", "k", "k"},
		{`"a b"`, "a b", "a b"},
		{`"a\"b\\c"`, `a"b\c`, `a"b\c`},
		{`"k";a;b=1;c=-2.5;d="x;y";e=tok;f=:AQ==:;g=?0;*h=*`, "k", "k"},
		{`"k"; a=1`, "k", "k"},
		{`a\b`, `a\b`, ""},
		{`k;p=1`, "k;p=1", ""},
		{``, "", ""},
		{`""`, "", ""},
		{`"`, "", ""},
		{`"abc`, "", ""},
		{`"a\"`, "", ""},
		{`"a\b"`, "", ""},
		{"\"\x7f\"", "", ""},
		{"\"\xff\"", "", ""},
		{"\"a\tb\"", "", ""},
		{`"a","b"`, "", ""},
		{`"a" "b"`, "", ""},
		{`"a";`, "", ""},
		{`"a";A=1`, "", ""},
		{`"a";b=`, "", ""},
		{`"a";b=1.2345`, "", ""},
		{`"a";b=1234567890123456`, "", ""},
		{`"a";b=-`, "", ""},
		{`"a";b=?2`, "", ""},
		{`"a";b=:a-b:`, "", ""},
		{`"a";b=:ab`, "", ""},
		{`"a";b="x`, "", ""},
		{"a b", "", ""},
		{`a"b`, "", ""},
		{"a\x00b", "", ""},
	} {
		for _, c := range []struct {
			s    idemhttp.Syntax
			want string
		}{{idemhttp.Lenient, tc.lenient}, {idemhttp.Strict, tc.strict}} {
			got, err := idemhttp.ParseKey(tc.in, c.s)
			switch {
			case c.want == "" && err == nil:
				t.Errorf("ParseKey(%q, %v) = %q, want an error", tc.in, c.s, got)
			case c.want != "" && (err != nil || got != c.want):
				t.Errorf("ParseKey(%q, %v) = %q, %v; want %q", tc.in, c.s, got, err, c.want)
			case err != nil && !strings.HasPrefix(err.Error(), idemhttp.ErrKeyInvalid.Error()):
				t.Errorf("ParseKey(%q, %v) error %q does not wrap ErrKeyInvalid", tc.in, c.s, err)
			}
		}
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"k"`, `k`, `"a\"b";x=1;y="z";w=:AA==:;v=?1;u=-1.25`, `"a", "b"`, `"`, `"\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		strict, serr := idemhttp.ParseKey(in, idemhttp.Strict)
		lenient, lerr := idemhttp.ParseKey(in, idemhttp.Lenient)
		if serr == nil && (lerr != nil || lenient != strict) {
			t.Fatalf("Strict accepts %q as %q but Lenient answers %q, %v", in, strict, lenient, lerr)
		}
		if lerr == nil && lenient == "" {
			t.Fatalf("ParseKey(%q) accepted an empty key", in)
		}
		if serr == nil {
			// A key the draft's syntax carries survives quoting.
			q := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(strict) + `"`
			if again, err := idemhttp.ParseKey(q, idemhttp.Strict); err != nil || again != strict {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q back", q, again, err, strict)
			}
		}
	})
}

// Without a scope decision New refuses to build the middleware, and says
// why: with no scope, one client gets another's stored response.
func TestScopeIsADecision(t *testing.T) {
	g := newGuard(t, newStore(t), idem.Config{})
	mw, err := idemhttp.New(g)
	adaptertest.CheckNoScope(t, err, "idemhttp", "*http.Request")
	if mw != nil {
		t.Error("New returned a middleware with its error")
	}
	if _, err := idemhttp.New(g, idemhttp.WithSharedScope()); err != nil {
		t.Errorf("New(WithSharedScope()): %v", err)
	}
}

func TestDefaultFingerprint(t *testing.T) {
	fp := func(method, target, body string) string {
		r, _ := http.NewRequest(method, "http://h"+target, nil)
		return string(idemhttp.DefaultFingerprint(r, []byte(body)))
	}
	base := fp("POST", "/a?b=1", "x")
	if again := fp("POST", "/a?b=1", "x"); again != base {
		t.Error("the fingerprint of one request differs between calls")
	}
	for _, other := range []string{
		fp("PATCH", "/a?b=1", "x"), fp("POST", "/a?b=2", "x"), fp("POST", "/b?b=1", "x"), fp("POST", "/a?b=1", "y"),
		fp("POST", "/a%2F?b=1", "x"), fp("POST", "/a?b=1x", ""),
	} {
		if other == base {
			t.Error("two different requests share a fingerprint")
		}
	}
}

// readSizes is a request body that records how much room each Read offers:
// the buffer the middleware allocated for it.
type readSizes struct {
	data  []byte
	sizes []int
}

func (r *readSizes) Read(p []byte) (int, error) {
	r.sizes = append(r.sizes, len(p))
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func (r *readSizes) Close() error { return nil }

// The body buffer grows as bytes arrive: a request that announces 1 MiB and
// sends ten bytes never gets a 1 MiB buffer.
func TestBodyBufferGrowsAsBytesArrive(t *testing.T) {
	mw, err := idemhttp.New(newGuard(t, newStore(t), idem.Config{}), idemhttp.WithSharedScope())
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, _ = io.ReadAll(r.Body) }))
	send := func(announced int64, body []byte) (*readSizes, int) {
		b := &readSizes{data: body}
		r := httptest.NewRequest(http.MethodPost, "/orders", nil)
		r.Body, r.ContentLength = b, announced
		r.Header.Set("Idempotency-Key", `"k`+strconv.Itoa(len(body))+`"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return b, w.Code
	}
	short, code := send(1<<20, []byte("0123456789"))
	if code != http.StatusBadRequest {
		t.Errorf("a body shorter than its Content-Length: %d, want 400", code)
	}
	if m := slices.Max(short.sizes); m > 4<<10 {
		t.Errorf("ten bytes of an announced MiB were read into a buffer of %d bytes", m)
	}
	full := bytes.Repeat([]byte("x"), 100_000)
	b, code := send(int64(len(full)), full)
	if code != http.StatusOK || !bytes.Equal(got, full) {
		t.Errorf("a 100 kB body: %d, the handler read %d bytes", code, len(got))
	}
	if m := slices.Max(b.sizes); m > 2*len(full) {
		t.Errorf("a 100 kB body was read into a buffer of %d bytes", m)
	}
}

// A scope or fingerprint function that panics on a request answers that
// request 500, logged, instead of leaving net/http to drop the connection
// without an answer; the key is not held, and the next request runs.
func TestUserFuncPanicIs500(t *testing.T) {
	for _, fn := range []string{"scope", "fingerprint"} {
		t.Run(fn, func(t *testing.T) {
			var logs adaptertest.Logs
			bug := func(r *http.Request) {
				if r.Header.Get("X-Bug") == fn {
					panic("bug in " + fn)
				}
			}
			mw, err := idemhttp.New(newGuard(t, newStore(t), idem.Config{}), idemhttp.WithLogger(logs.Logger()),
				idemhttp.WithScope(func(r *http.Request) string { bug(r); return "tenant" }),
				idemhttp.WithFingerprint(func(r *http.Request, body []byte) []byte { bug(r); return body }))
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusCreated)
			})))
			defer srv.Close()
			post := func(bug string) (int, error) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
				req.Header.Set("Idempotency-Key", "k1")
				req.Header.Set("X-Bug", bug)
				res, err := srv.Client().Do(req)
				if err != nil {
					return 0, err
				}
				res.Body.Close()
				return res.StatusCode, nil
			}
			if status, err := post(fn); err != nil || status != http.StatusInternalServerError {
				t.Fatalf("a request whose %s function panics: %d, %v; want 500", fn, status, err)
			}
			if status, err := post(""); err != nil || status != http.StatusCreated || runs.Load() != 1 {
				t.Fatalf("the next request of the key: %d, %v, %d runs; want 201 and one run", status, err, runs.Load())
			}
			if !strings.Contains(logs.String(), "panicked: bug in "+fn) || !strings.Contains(logs.String(), "stack=") {
				t.Errorf("the panic is not logged with its stack:\n%s", logs.String())
			}
		})
	}
}
