package idemhttp_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/idemhttp/idemhttptest"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/memstore"
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

func newGuard(t testing.TB, s idem.Store, cfg idem.Config) *idem.Guard {
	g, err := idem.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func TestMiddleware(t *testing.T) {
	s := newStore(t)
	idemhttptest.Run(t, func(t *testing.T) idem.Store { return s })
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	s := newStore(t)
	g := newGuard(t, s, idem.Config{})
	for _, tc := range []struct {
		name string
		g    *idem.Guard
		opts []idemhttp.Option
		want string
	}{
		{"nil guard", nil, nil, "Guard is nil"},
		{"header", g, []idemhttp.Option{idemhttp.WithHeader("Bad Header")}, "WithHeader"},
		{"no methods", g, []idemhttp.Option{idemhttp.WithMethods()}, "WithMethods"},
		{"bad method", g, []idemhttp.Option{idemhttp.WithMethods("PO ST")}, "WithMethods"},
		{"key length", g, []idemhttp.Option{idemhttp.WithMaxKeyLen(0)}, "WithMaxKeyLen"},
		{"body cap", g, []idemhttp.Option{idemhttp.WithMaxBodyBytes(-1)}, "WithMaxBodyBytes"},
		{"cache cap", g, []idemhttp.Option{idemhttp.WithMaxCachedBytes(0)}, "WithMaxCachedBytes"},
		{"retry after", g, []idemhttp.Option{idemhttp.WithRetryAfter(0)}, "WithRetryAfter"},
		{"syntax", g, []idemhttp.Option{idemhttp.WithSyntax(7)}, "WithSyntax"},
		{"nil fingerprint", g, []idemhttp.Option{idemhttp.WithFingerprint(nil)}, "WithFingerprint"},
		{"nil scope", g, []idemhttp.Option{idemhttp.WithScope(nil)}, "WithScope"},
		{"nil error handler", g, []idemhttp.Option{idemhttp.WithErrorHandler(nil)}, "WithErrorHandler"},
		{"nil validator", g, []idemhttp.Option{idemhttp.WithKeyValidator(nil)}, "WithKeyValidator"},
		{"nil logger", g, []idemhttp.Option{idemhttp.WithLogger(nil)}, "WithLogger"},
		{"nil option", g, []idemhttp.Option{nil}, "nil Option"},
		{"guard keys too short", newGuard(t, s, idem.Config{MaxKeyLen: 32}), nil, "MaxKeyLen"},
		{"guard validates keys", newGuard(t, s, idem.Config{ValidateKey: func(string) error { return nil }}), nil, "ValidateKey"},
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

func TestGuardKeyNeverCollides(t *testing.T) {
	s := newStore(t)
	g := newGuard(t, s, idem.Config{MaxKeyLen: 40})
	seen := map[string]string{}
	for _, sk := range [][2]string{
		{"", "abc"}, {"a", "bc"}, {"ab", "c"}, {"abc", ""}, {"a:b", "c"}, {"a", "b:c"},
		{"\x01", "x"}, {"", "\x01x"}, {"\x00", ""}, {"", "\x00"},
		{strings.Repeat("s", 40), "k"}, {strings.Repeat("s", 39), "sk"}, {"", strings.Repeat("k", 60)},
	} {
		k := idemhttp.GuardKey(g, sk[0], sk[1])
		if len(k) > 40 {
			t.Errorf("GuardKey(%q, %q) is %d bytes, longer than the Guard's MaxKeyLen 40", sk[0], sk[1], len(k))
		}
		if prev, dup := seen[k]; dup {
			t.Errorf("GuardKey(%q, %q) = GuardKey of %s", sk[0], sk[1], prev)
		}
		seen[k] = sk[0] + "/" + sk[1]
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
