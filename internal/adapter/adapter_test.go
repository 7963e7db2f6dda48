package adapter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/internal/adapter"
	"github.com/idemgo/idem/memstore"
)

func TestMain(m *testing.M) { idemtest.Main(m, "github.com/idemgo/idem") }

// msg is the message type of a test adapter; its scope is its tenant.
type msg struct{ tenant string }

type options struct {
	adapter.Policy[msg]
	n int
}

type option func(*options)

func withN(n int) option {
	return func(o *options) {
		if o.Check(n > 0, "withN(%d): must be positive", n) {
			o.n = n
		}
	}
}

var names = adapter.Names{Pkg: "testadapter", Request: "msg", Key: "the key header"}

func build(t *testing.T, g *idem.Guard, opts ...option) (*options, error) {
	t.Helper()
	o := &options{}
	return o, adapter.Build(o, &o.Policy, names, g, nil, opts, nil)
}

func newGuard(t *testing.T, cfg idem.Config) *idem.Guard {
	t.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	g, err := idem.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func scope(o *options)  { o.SetScope(func(m msg) string { return m.tenant }) }
func shared(o *options) { o.SetSharedScope() }

func TestBuildRequiresAScopeDecision(t *testing.T) {
	g := newGuard(t, idem.Config{})
	for _, tc := range []struct {
		name string
		g    *idem.Guard
		opts []option
		want []string // in the error, "" for none
	}{
		{"scope", g, []option{scope}, nil},
		{"shared", g, []option{shared}, nil},
		{"neither", g, nil, []string{"testadapter: New: no scope decision", "WithScope(func(msg) string)", "WithSharedScope()", "Security Considerations"}},
		{"both", g, []option{scope, shared}, []string{"testadapter: New: WithScope and WithSharedScope are both given"}},
		{"nil scope", g, []option{func(o *options) { o.SetScope(nil) }}, []string{"testadapter: WithScope(nil)"}},
		{"every error at once", g, []option{nil, withN(0)}, []string{"testadapter: New: nil Option", "testadapter: withN(0): must be positive", "no scope decision"}},
		{"nil guard", nil, []option{shared}, []string{"testadapter: New: Guard is nil"}},
	} {
		_, err := build(t, tc.g, tc.opts...)
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error, want one saying %q", tc.name, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
}

func TestScopesSeparateKeys(t *testing.T) {
	g := newGuard(t, idem.Config{})
	o, err := build(t, g, scope)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(m msg, v string) idem.Result {
		t.Helper()
		res, err := o.Guard().DoScoped(ctx, o.Scope(m), "k", nil, func(context.Context) ([]byte, error) { return []byte(v), nil })
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	run(msg{"alice"}, "alice's")
	if res := run(msg{"bob"}, "bob's"); res.Replayed || string(res.Value) != "bob's" {
		t.Fatalf("bob with alice's key got %q (replayed %v)", res.Value, res.Replayed)
	}
	if _, err := g.Store().Get(ctx, g.ScopedStoreKey("alice", "k")); err != nil {
		t.Fatalf("alice's record is not under the Guard's scoped store key: %v", err)
	}
}

func TestKey(t *testing.T) {
	errNotUUID := errors.New("not a UUID")
	g := newGuard(t, idem.Config{MaxKeyLen: 8, ValidateKey: func(k string) error {
		if k == "bad" {
			return errNotUUID
		}
		return nil
	}})
	optional, err := build(t, g, shared)
	if err != nil {
		t.Fatal(err)
	}
	required, err := build(t, g, shared, func(o *options) { o.SetRequired() })
	if err != nil {
		t.Fatal(err)
	}
	unquote := func(v string) (string, error) {
		if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
			return "", fmt.Errorf("%q is not quoted", v)
		}
		return v[1 : len(v)-1], nil
	}
	for _, tc := range []struct {
		name    string
		o       *options
		values  []string
		parse   func(string) (string, error)
		key     string
		missing bool
		reason  string // in the error; "" for no error
	}{
		{"one", optional, []string{"k1"}, nil, "k1", false, ""},
		{"none", optional, nil, nil, "", false, ""},
		{"none, required", required, nil, nil, "", true, "the key header is missing"},
		{"twice", optional, []string{"a", "a"}, nil, "", false, "the key header is sent 2 times; send it once"},
		{"empty", optional, []string{""}, nil, "", false, "the key is empty"},
		{"too long", optional, []string{"123456789"}, nil, "", false, "the key is 9 bytes long, longer than 8"},
		{"longest", optional, []string{"12345678"}, nil, "12345678", false, ""},
		{"validator", optional, []string{"bad"}, nil, "", false, "not a UUID"},
		{"parsed", optional, []string{`"12345678"`}, unquote, "12345678", false, ""},
		{"parse refuses", optional, []string{"k"}, unquote, "", false, `"k" is not quoted`},
	} {
		key, err := tc.o.Key(tc.values, tc.parse)
		switch {
		case tc.reason == "" && (err != nil || key != tc.key):
			t.Errorf("%s: Key = %q, %v; want %q", tc.name, key, err, tc.key)
		case tc.reason != "" && (err == nil || err.Error() != tc.reason):
			t.Errorf("%s: Key = %q, %v; want the error %q", tc.name, key, err, tc.reason)
		case tc.reason != "" && !errors.Is(err, idem.ErrInvalidKey):
			t.Errorf("%s: %v does not wrap idem.ErrInvalidKey", tc.name, err)
		case tc.reason != "" && errors.Is(err, adapter.ErrKeyMissing) != tc.missing:
			t.Errorf("%s: errors.Is(%v, ErrKeyMissing) = %v, want %v", tc.name, err, !tc.missing, tc.missing)
		}
	}
	if _, err := optional.Key([]string{"bad"}, nil); !errors.Is(err, errNotUUID) {
		t.Errorf("the validator's error %v is not in the chain", err)
	}
}

// What a real Guard answers is classified as the table says.
func TestClassifyGuardAnswers(t *testing.T) {
	g := newGuard(t, idem.Config{MaxAttempts: 1})
	ctx := context.Background()
	do := func(key string, payload string, fn func(context.Context) ([]byte, error)) error {
		_, err := g.Do(ctx, key, []byte(payload), fn)
		return err
	}
	ok := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	fail := func(context.Context) ([]byte, error) { return nil, idem.Permanent(errors.New("no")) }
	retry := func(context.Context) ([]byte, error) { return nil, errors.New("later") }
	for _, tc := range []struct {
		name string
		err  error
		want adapter.Class
	}{
		{"completed", do("a", "p", ok), adapter.OK},
		{"replayed", do("a", "p", ok), adapter.OK},
		{"reused", do("a", "other", ok), adapter.KeyReused},
		{"permanent", do("b", "p", fail), adapter.Permanent},
		{"stored failure", do("b", "p", fail), adapter.StoredFailure},
		{"retryable", do("c", "p", retry), adapter.Retryable},
		{"too many attempts", do("c", "p", ok), adapter.TooManyAttempts},
		{"invalid", do("", "p", ok), adapter.InvalidKey},
	} {
		if got := adapter.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	g.Close()
	if got := adapter.Classify(do("d", "p", ok)); got != adapter.Ended {
		t.Errorf("after Close: %v, want Ended", got)
	}
}

// Protect turns a user function's panic into a *FuncPanic naming it, and
// TooLarge, which calls the Guard's Observer inside the operation, recovers
// the Observer's panic as the Guard does.
func TestProtect(t *testing.T) {
	g := newGuard(t, idem.Config{Observer: func(context.Context, idem.Event) { panic("observer bug") }})
	o, err := build(t, g, shared)
	if err != nil {
		t.Fatal(err)
	}
	err = o.Protect(t.Context(), "the scope function (WithScope)", func() { panic("index out of range") })
	fp, ok := errors.AsType[*adapter.FuncPanic](err)
	if !ok || fp.Value != "index out of range" || len(fp.Stack) == 0 ||
		err.Error() != "the scope function (WithScope) panicked: index out of range" {
		t.Fatalf("Protect of a panic = %v (%#v)", err, err)
	}
	if err := o.Protect(t.Context(), "f", func() {}); err != nil {
		t.Fatalf("Protect of a call that returns = %v", err)
	}
	o.TooLarge(t.Context(), "", "k", 1<<20, idem.ErrValueTooLarge) // must not panic
}
