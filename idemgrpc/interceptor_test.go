package idemgrpc_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
	"github.com/idemgo/idem/idemgrpc/idemgrpctest"
	"github.com/idemgo/idem/internal/adaptertest"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newGuard(t *testing.T, s storage.Store, cfg idem.Config) *idem.Guard {
	t.Helper()
	cfg.Namespace = "idemgrpc-" + rand.Text()
	g, err := idem.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func TestInterceptor(t *testing.T) {
	s := newStore(t)
	idemgrpctest.Run(t, func(t *testing.T) storage.Store { return s })
}

// charge calls icpt as gRPC calls it, with key, before a handler
// that counts its runs in runs.
func charge(icpt grpc.UnaryServerInterceptor, key string, runs *atomic.Int32) (any, error) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
	return icpt(ctx, wrapperspb.String("1"), &grpc.UnaryServerInfo{FullMethod: "/idemgrpc.test.Payments/Charge"},
		func(context.Context, any) (any, error) {
			runs.Add(1)
			return wrapperspb.String("charged"), nil
		})
}

// downStore fails every claim, as a store that cannot be reached.
type downStore struct{ storage.Store }

func (downStore) Claim(context.Context, storage.ClaimArgs) (storage.Claim, error) {
	return storage.Claim{}, errors.New("connection refused")
}

func TestStoreUnavailable(t *testing.T) {
	g := newGuard(t, downStore{newStore(t)}, idem.Config{})
	var runs atomic.Int32
	i, err := idemgrpc.New(g, idemgrpc.WithSharedScope())
	if err != nil {
		t.Fatal(err)
	}
	_, err = charge(i.Unary(), "k", &runs)
	if status.Code(err) != codes.Unavailable || runs.Load() != 0 {
		t.Errorf("fail closed: %v, %d runs; want Unavailable and no run", err, runs.Load())
	}
	if strings.Contains(err.Error(), "connection refused") {
		t.Errorf("the store's error reaches the client: %v", err)
	}
	open, err := idemgrpc.New(newGuard(t, downStore{newStore(t)}, idem.Config{FailOpen: true}), idemgrpc.WithSharedScope())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := charge(open.Unary(), "k", &runs)
	if err != nil || resp.(*wrapperspb.StringValue).GetValue() != "charged" || runs.Load() != 1 {
		t.Errorf("fail open: %v, %v, %d runs; want the handler's response from one run", resp, err, runs.Load())
	}
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	s := newStore(t)
	g := newGuard(t, s, idem.Config{})
	shared := idemgrpc.WithSharedScope()
	for _, tc := range []struct {
		name string
		g    *idem.Guard
		opts []idemgrpc.Option
		want string
	}{
		{"nil guard", nil, []idemgrpc.Option{shared}, "Guard is nil"},
		{"no scope decision", g, nil, "WithSharedScope"},
		{"both scopes", g, []idemgrpc.Option{shared, idemgrpc.WithScope(func(context.Context) string { return "" })}, "both"},
		{"empty key", g, []idemgrpc.Option{shared, idemgrpc.WithMetadataKey("")}, "WithMetadataKey"},
		{"reserved key", g, []idemgrpc.Option{shared, idemgrpc.WithMetadataKey("grpc-timeout")}, "WithMetadataKey"},
		{"bad key", g, []idemgrpc.Option{shared, idemgrpc.WithMetadataKey("a key")}, "WithMetadataKey"},
		{"OK permanent", g, []idemgrpc.Option{shared, idemgrpc.WithPermanentCodes(codes.OK)}, "WithPermanentCodes"},
		{"nil scope", g, []idemgrpc.Option{idemgrpc.WithScope(nil)}, "WithScope"},
		{"nil types", g, []idemgrpc.Option{shared, idemgrpc.WithTypes(nil)}, "WithTypes"},
		{"nil logger", g, []idemgrpc.Option{shared, idemgrpc.WithLogger(nil)}, "WithLogger"},
		{"nil option", g, []idemgrpc.Option{shared, nil}, "nil Option"},
	} {
		i, err := idemgrpc.New(tc.g, tc.opts...)
		if err == nil || i != nil || !strings.HasPrefix(err.Error(), "idemgrpc: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, %v; want an error starting with idemgrpc: naming %s", tc.name, i, err, tc.want)
		}
	}
	// The one-step constructors stop the program as the server is built:
	// a configuration error never reaches a remote client.
	for name, build := range map[string]func(){
		"UnaryServerInterceptor":  func() { idemgrpc.UnaryServerInterceptor(g, shared, idemgrpc.WithTypes(nil)) },
		"StreamServerInterceptor": func() { idemgrpc.StreamServerInterceptor(g, shared, idemgrpc.WithTypes(nil)) },
	} {
		if err := panicOf(build); err == nil || !strings.HasPrefix(err.Error(), "idemgrpc: ") || !strings.Contains(err.Error(), "WithTypes") {
			t.Errorf("%s misconfigured: panicked with %v, want New's error naming WithTypes", name, err)
		}
	}
}

// panicOf calls f and returns the error it panicked with, or nil.
func panicOf(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err, _ = r.(error)
			if err == nil {
				err = fmt.Errorf("panicked with a %T: %v", r, r)
			}
		}
	}()
	f()
	return nil
}

// Without a scope decision New refuses to build the interceptor, and says
// why: with no scope, one client gets another's stored response.
func TestScopeIsADecision(t *testing.T) {
	g := newGuard(t, newStore(t), idem.Config{})
	i, err := idemgrpc.New(g)
	adaptertest.CheckNoScope(t, err, "idemgrpc", "context.Context")
	if i != nil {
		t.Error("New returned an interceptor with its error")
	}
	if err := panicOf(func() { idemgrpc.UnaryServerInterceptor(g) }); err == nil || !strings.Contains(err.Error(), "WithSharedScope") {
		t.Errorf("UnaryServerInterceptor without a scope decision panicked with %v, want New's error", err)
	}
}

// A scope, fingerprint or method filter function that panics on a call
// answers that call Internal, logged, instead of ending the server (gRPC
// recovers no panic); the key is not held, and the next call runs.
func TestUserFuncPanicIsInternal(t *testing.T) {
	for _, fn := range []string{"scope", "fingerprint", "methods"} {
		t.Run(fn, func(t *testing.T) {
			var bug atomic.Bool
			hit := func(name string) {
				if name == fn && bug.Load() {
					panic("bug in " + fn)
				}
			}
			var logs adaptertest.Logs
			i, err := idemgrpc.New(newGuard(t, newStore(t), idem.Config{}), idemgrpc.WithLogger(logs.Logger()),
				idemgrpc.WithScope(func(context.Context) string { hit("scope"); return "tenant" }),
				idemgrpc.WithFingerprint(func(m string, req any) ([]byte, error) {
					hit("fingerprint")
					return idemgrpc.DefaultFingerprint(m, req)
				}),
				idemgrpc.WithMethods(func(string) bool { hit("methods"); return true }))
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			bug.Store(true)
			_, err = charge(i.Unary(), "k", &runs)
			if status.Code(err) != codes.Internal || runs.Load() != 0 || strings.Contains(err.Error(), "bug in") {
				t.Fatalf("a call whose %s function panics: %v, %d runs; want Internal without the panic's value, and no run", fn, err, runs.Load())
			}
			bug.Store(false)
			if _, err := charge(i.Unary(), "k", &runs); err != nil || runs.Load() != 1 {
				t.Fatalf("the next call of the key: %v, %d runs; want one run", err, runs.Load())
			}
			if !strings.Contains(logs.String(), "panicked: bug in "+fn) || !strings.Contains(logs.String(), "stack=") {
				t.Errorf("the panic is not logged with its stack:\n%s", logs.String())
			}
		})
	}
}
