package idemgrpc_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
	"github.com/idemgo/idem/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tiny service under test, registered by hand: Charge and Refund take
// and return a StringValue.
const (
	chargeMethod = "/idemgrpc.test.Payments/Charge"
	refundMethod = "/idemgrpc.test.Payments/Refund"
)

type payments struct {
	runs   atomic.Int32
	handle func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

func (p *payments) call(method string) func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	return func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			p.runs.Add(1)
			if p.handle == nil {
				return wrapperspb.String("charged " + req.(*wrapperspb.StringValue).GetValue()), nil
			}
			return p.handle(ctx, method, req.(*wrapperspb.StringValue))
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: method}, h)
	}
}

// serve starts the service behind the interceptor on a bufconn and returns
// a client connection to it.
func serve(t *testing.T, p *payments, icpt grpc.UnaryServerInterceptor) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnaryInterceptor(icpt))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "idemgrpc.test.Payments",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Charge", Handler: p.call(chargeMethod)},
			{MethodName: "Refund", Handler: p.call(refundMethod)},
		},
	}, p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return conn
}

func newGuard(t *testing.T, cfg idem.Config) *idem.Guard {
	t.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return newGuardOver(t, s, cfg)
}

func newGuardOver(t *testing.T, s idem.Store, cfg idem.Config) *idem.Guard {
	t.Helper()
	cfg.Namespace = "idemgrpc-" + rand.Text()
	g, err := idem.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func interceptor(t *testing.T, g *idem.Guard, opts ...idemgrpc.Option) grpc.UnaryServerInterceptor {
	t.Helper()
	i, err := idemgrpc.New(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return i.Unary()
}

// result is what one call got.
type result struct {
	out      string
	err      error
	replayed bool
}

// invoke calls method with in and the metadata pairs (key, value, ...).
func invoke(conn *grpc.ClientConn, method, in string, md ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	out := new(wrapperspb.StringValue)
	var trailer metadata.MD
	err := conn.Invoke(ctx, method, wrapperspb.String(in), out, grpc.Trailer(&trailer))
	return result{out: out.GetValue(), err: err, replayed: strings.Join(trailer.Get(idemgrpc.ReplayedTrailer), ",") == "true"}
}

func charge(conn *grpc.ClientConn, key, in string) result {
	return invoke(conn, chargeMethod, in, "idempotency-key", key)
}

func want(t *testing.T, what string, r result, out string, code codes.Code, replayed bool) {
	t.Helper()
	if got := status.Code(r.err); got != code || r.out != out || r.replayed != replayed {
		t.Errorf("%s: %q, %v (replayed %v); want %q, %v (replayed %v)", what, r.out, r.err, r.replayed, out, code, replayed)
	}
}

func wantRuns(t *testing.T, p *payments, n int32) {
	t.Helper()
	if got := p.runs.Load(); got != n {
		t.Errorf("the handler ran %d times, want %d", got, n)
	}
}

func TestRetryReplays(t *testing.T) {
	p := &payments{}
	conn := serve(t, p, interceptor(t, newGuard(t, idem.Config{})))
	want(t, "first", charge(conn, "k1", "10"), "charged 10", codes.OK, false)
	want(t, "retry", charge(conn, "k1", "10"), "charged 10", codes.OK, true)
	want(t, "another key", charge(conn, "k2", "10"), "charged 10", codes.OK, false)
	wantRuns(t, p, 2)
}

func TestMissingKey(t *testing.T) {
	p := &payments{}
	g := newGuard(t, idem.Config{})
	conn := serve(t, p, interceptor(t, g))
	want(t, "no key", invoke(conn, chargeMethod, "1"), "charged 1", codes.OK, false)
	want(t, "no key again", invoke(conn, chargeMethod, "1"), "charged 1", codes.OK, false)
	wantRuns(t, p, 2)

	required := serve(t, p, interceptor(t, g, idemgrpc.WithRequired()))
	want(t, "required", invoke(required, chargeMethod, "1"), "", codes.InvalidArgument, false)
	wantRuns(t, p, 2)
}

func TestInvalidKeys(t *testing.T) {
	p := &payments{}
	conn := serve(t, p, interceptor(t, newGuard(t, idem.Config{}), idemgrpc.WithMaxKeyLen(36),
		idemgrpc.WithKeyValidator(func(k string) error {
			if strings.HasPrefix(k, "bad") {
				return errors.New("must not start with bad")
			}
			return nil
		})))
	for name, md := range map[string][]string{
		"empty":     {"idempotency-key", ""},
		"twice":     {"idempotency-key", "a", "idempotency-key", "b"},
		"too long":  {"idempotency-key", strings.Repeat("k", 37)},
		"validator": {"idempotency-key", "bad-key"},
	} {
		r := invoke(conn, chargeMethod, "1", md...)
		want(t, name, r, "", codes.InvalidArgument, false)
		if msg := status.Convert(r.err).Message(); !strings.HasPrefix(msg, "idemgrpc: ") {
			t.Errorf("%s: message %q, want it to start with idemgrpc:", name, msg)
		}
	}
	wantRuns(t, p, 0)
	want(t, "36 bytes", charge(conn, strings.Repeat("k", 36), "1"), "charged 1", codes.OK, false)
}

func TestKeyReused(t *testing.T) {
	p := &payments{}
	conn := serve(t, p, interceptor(t, newGuard(t, idem.Config{})))
	want(t, "first", charge(conn, "k", "10"), "charged 10", codes.OK, false)
	want(t, "another request", charge(conn, "k", "11"), "", codes.InvalidArgument, false)
	want(t, "another method", invoke(conn, refundMethod, "10", "idempotency-key", "k"), "", codes.InvalidArgument, false)
	want(t, "the first again", charge(conn, "k", "10"), "charged 10", codes.OK, true)
	wantRuns(t, p, 1)
}

func TestInProgress(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	p := &payments{handle: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		close(entered)
		<-release
		return wrapperspb.String("done"), nil
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, idem.Config{})))
	first := make(chan result)
	go func() { first <- charge(conn, "k", "1") }()
	<-entered
	want(t, "while in progress", charge(conn, "k", "1"), "", codes.Aborted, false)
	close(release)
	want(t, "first", <-first, "done", codes.OK, false)
	want(t, "after", charge(conn, "k", "1"), "done", codes.OK, true)
	wantRuns(t, p, 1)
}

func TestConcurrentWithWaitRunOnce(t *testing.T) {
	const n = 50
	p := &payments{handle: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		time.Sleep(20 * time.Millisecond) // hold the key while the others arrive
		return wrapperspb.String("done"), nil
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, idem.Config{Wait: 20 * time.Second})))
	var wg sync.WaitGroup
	var replayed atomic.Int32
	for range n {
		wg.Go(func() {
			r := charge(conn, "k", "1")
			if r.err != nil || r.out != "done" {
				t.Errorf("call: %q, %v", r.out, r.err)
			}
			if r.replayed {
				replayed.Add(1)
			}
		})
	}
	wg.Wait()
	wantRuns(t, p, 1)
	if replayed.Load() != n-1 {
		t.Errorf("%d of %d calls replayed, want %d", replayed.Load(), n, n-1)
	}
}

// notFound is a status with a detail, as handlers return.
func notFound(t *testing.T) *status.Status {
	detail, err := anypb.New(wrapperspb.String("order 42"))
	if err != nil {
		t.Fatal(err)
	}
	return status.FromProto(&spb.Status{Code: int32(codes.NotFound), Message: "no such order", Details: []*anypb.Any{detail}})
}

func TestPermanentErrorReplayed(t *testing.T) {
	st := notFound(t)
	p := &payments{handle: func(context.Context, string, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, st.Err()
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, idem.Config{})))
	first := charge(conn, "k", "1")
	want(t, "first", first, "", codes.NotFound, false)
	again := charge(conn, "k", "1")
	want(t, "retry", again, "", codes.NotFound, true)
	if got := status.Convert(again.err).Proto(); !proto.Equal(got, st.Proto()) {
		t.Errorf("replayed status %v, want %v", got, st.Proto())
	}
	wantRuns(t, p, 1)
}

func TestRetryableErrorReleases(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	p := &payments{handle: func(context.Context, string, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if fail.Swap(false) {
			return nil, status.Error(codes.Unavailable, "downstream down")
		}
		return wrapperspb.String("done"), nil
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, idem.Config{})))
	want(t, "first", charge(conn, "k", "1"), "", codes.Unavailable, false)
	want(t, "retry", charge(conn, "k", "1"), "done", codes.OK, false)
	want(t, "retry after success", charge(conn, "k", "1"), "done", codes.OK, true)
	wantRuns(t, p, 2)
}

func TestPermanentCodesAndMarkedErrors(t *testing.T) {
	p := &payments{handle: func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		switch in.GetValue() {
		case "exhausted":
			return nil, status.Error(codes.ResourceExhausted, "quota")
		case "notfound":
			return nil, status.Error(codes.NotFound, "none")
		}
		return nil, idem.Permanent(errors.New("card declined"))
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, idem.Config{}), idemgrpc.WithPermanentCodes(codes.ResourceExhausted)))
	for _, in := range []string{"exhausted", "exhausted"} {
		r := charge(conn, "k1", in)
		want(t, in, r, "", codes.ResourceExhausted, r.replayed)
	}
	wantRuns(t, p, 1) // stored by WithPermanentCodes
	want(t, "notfound", charge(conn, "k2", "notfound"), "", codes.NotFound, false)
	want(t, "notfound again", charge(conn, "k2", "notfound"), "", codes.NotFound, false)
	wantRuns(t, p, 3) // no longer permanent
	first := charge(conn, "k3", "marked")
	want(t, "marked permanent", first, "", codes.Unknown, false)
	again := charge(conn, "k3", "marked")
	want(t, "marked permanent again", again, "", codes.Unknown, true)
	if m := status.Convert(again.err).Message(); m != "card declined" {
		t.Errorf("replayed message %q, want %q", m, "card declined")
	}
	wantRuns(t, p, 4)
}

func TestTooManyAttempts(t *testing.T) {
	p := &payments{handle: func(context.Context, string, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, status.Error(codes.Internal, "bug")
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, idem.Config{MaxAttempts: 1})))
	want(t, "attempt 1", charge(conn, "k", "1"), "", codes.Internal, false)
	want(t, "attempt 2", charge(conn, "k", "1"), "", codes.FailedPrecondition, true)
	wantRuns(t, p, 1)
}

// downStore fails every claim, as a store that cannot be reached.
type downStore struct{ idem.Store }

func (downStore) Claim(context.Context, idem.ClaimArgs) (idem.Claim, error) {
	return idem.Claim{}, errors.New("connection refused")
}

func TestStoreUnavailable(t *testing.T) {
	s, _ := memstore.New(memstore.Config{})
	t.Cleanup(func() { s.Close() })
	g := newGuardOver(t, downStore{s}, idem.Config{})
	p := &payments{}
	r := charge(serve(t, p, interceptor(t, g)), "k", "1")
	want(t, "fail closed", r, "", codes.Unavailable, false)
	if strings.Contains(r.err.Error(), "connection refused") {
		t.Errorf("the store's error reaches the client: %v", r.err)
	}
	wantRuns(t, p, 0)
	want(t, "fail open", charge(serve(t, p, interceptor(t, g, idemgrpc.WithFailOpen())), "k", "1"), "charged 1", codes.OK, false)
}

func TestScopesNeverCross(t *testing.T) {
	p := &payments{handle: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		return wrapperspb.String(strings.Join(md.Get("account"), "") + ":" + in.GetValue()), nil
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, idem.Config{}), idemgrpc.WithScope(func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		return strings.Join(md.Get("account"), "")
	})))
	as := func(account, in string) result {
		return invoke(conn, chargeMethod, in, "idempotency-key", "k", "account", account)
	}
	want(t, "alice", as("alice", "1"), "alice:1", codes.OK, false)
	want(t, "bob", as("bob", "1"), "bob:1", codes.OK, false)
	want(t, "alice again", as("alice", "1"), "alice:1", codes.OK, true)
	want(t, "bob again", as("bob", "1"), "bob:1", codes.OK, true)
	wantRuns(t, p, 2)
}

func TestMethodsFilter(t *testing.T) {
	p := &payments{}
	conn := serve(t, p, interceptor(t, newGuard(t, idem.Config{}), idemgrpc.WithMethods(func(m string) bool { return m == chargeMethod })))
	want(t, "refund", invoke(conn, refundMethod, "1", "idempotency-key", "k"), "charged 1", codes.OK, false)
	want(t, "refund again", invoke(conn, refundMethod, "1", "idempotency-key", "k"), "charged 1", codes.OK, false)
	want(t, "charge", charge(conn, "k", "1"), "charged 1", codes.OK, false)
	want(t, "charge again", charge(conn, "k", "1"), "charged 1", codes.OK, true)
	wantRuns(t, p, 3)
}

func TestTokenInHandlerContext(t *testing.T) {
	p := &payments{handle: func(ctx context.Context, _ string, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if tok, ok := idem.TokenFrom(ctx); !ok || tok == 0 {
			t.Errorf("idem.TokenFrom(handler's context) = %v, %v; want the lease token", tok, ok)
		}
		return wrapperspb.String("ok"), nil
	}}
	want(t, "call", charge(serve(t, p, interceptor(t, newGuard(t, idem.Config{}))), "k", "1"), "ok", codes.OK, false)
}

func TestUnreplayableStoredValues(t *testing.T) {
	g := newGuard(t, idem.Config{})
	p := &payments{}
	fixed := func(string, any) ([]byte, error) { return []byte("fixed"), nil }
	conn := serve(t, p, interceptor(t, g, idemgrpc.WithFingerprint(fixed)))
	store := func(key string, v []byte) {
		if _, err := g.Do(context.Background(), idemgrpc.GuardKey(g, "", key), []byte("fixed"), func(context.Context) ([]byte, error) { return v, nil }); err != nil {
			t.Fatal(err)
		}
	}
	store("garbage", []byte("\x07garbage"))
	want(t, "garbage", charge(conn, "garbage", "1"), "", codes.Internal, false)
	unknown, _ := idemgrpc.EncodeResponse(wrapperspb.String("x"))
	store("unknown type", unknown)
	noTypes := serve(t, p, interceptor(t, g, idemgrpc.WithFingerprint(fixed), idemgrpc.WithTypes(new(protoregistry.Types))))
	want(t, "unknown type", charge(noTypes, "unknown type", "1"), "", codes.Internal, false)
	want(t, "known type", charge(conn, "unknown type", "1"), "x", codes.OK, true)
	wantRuns(t, p, 0)
}

func TestPanicReleases(t *testing.T) {
	icpt := interceptor(t, newGuard(t, idem.Config{}))
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k"))
	info := &grpc.UnaryServerInfo{FullMethod: chargeMethod}
	var runs atomic.Int32
	handler := func(context.Context, any) (any, error) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		return wrapperspb.String("ok"), nil
	}
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the handler's panic", p)
			}
		}()
		icpt(ctx, wrapperspb.String("1"), info, handler)
	}()
	resp, err := icpt(ctx, wrapperspb.String("1"), info, handler)
	if err != nil || resp.(*wrapperspb.StringValue).GetValue() != "ok" || runs.Load() != 2 {
		t.Errorf("after the panic: %v, %v, %d runs; want ok from a second run", resp, err, runs.Load())
	}
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	g := newGuard(t, idem.Config{})
	s, _ := memstore.New(memstore.Config{})
	t.Cleanup(func() { s.Close() })
	for _, tc := range []struct {
		name string
		g    *idem.Guard
		opts []idemgrpc.Option
		want string
	}{
		{"nil guard", nil, nil, "Guard is nil"},
		{"empty key", g, []idemgrpc.Option{idemgrpc.WithMetadataKey("")}, "WithMetadataKey"},
		{"reserved key", g, []idemgrpc.Option{idemgrpc.WithMetadataKey("grpc-timeout")}, "WithMetadataKey"},
		{"bad key", g, []idemgrpc.Option{idemgrpc.WithMetadataKey("a key")}, "WithMetadataKey"},
		{"key length", g, []idemgrpc.Option{idemgrpc.WithMaxKeyLen(0)}, "WithMaxKeyLen"},
		{"OK permanent", g, []idemgrpc.Option{idemgrpc.WithPermanentCodes(codes.OK)}, "WithPermanentCodes"},
		{"nil scope", g, []idemgrpc.Option{idemgrpc.WithScope(nil)}, "WithScope"},
		{"nil types", g, []idemgrpc.Option{idemgrpc.WithTypes(nil)}, "WithTypes"},
		{"nil option", g, []idemgrpc.Option{nil}, "nil Option"},
		{"guard keys too short", newGuardOver(t, s, idem.Config{MaxKeyLen: 32}), nil, "MaxKeyLen"},
	} {
		i, err := idemgrpc.New(tc.g, tc.opts...)
		if err == nil || i != nil || !strings.HasPrefix(err.Error(), "idemgrpc: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, %v; want an error starting with idemgrpc: naming %s", tc.name, i, err, tc.want)
		}
	}
	// The one-step constructor refuses every call instead.
	p := &payments{}
	conn := serve(t, p, idemgrpc.UnaryServerInterceptor(g, idemgrpc.WithMaxKeyLen(-1)))
	r := charge(conn, "k", "1")
	want(t, "misconfigured", r, "", codes.Internal, false)
	if !strings.Contains(r.err.Error(), "WithMaxKeyLen") {
		t.Errorf("misconfigured: %v does not name the bad option", r.err)
	}
	wantRuns(t, p, 0)
}

func TestGuardKeyNeverCollides(t *testing.T) {
	g := newGuard(t, idem.Config{MaxKeyLen: 40})
	seen := map[string]bool{}
	for _, sk := range [][2]string{
		{"", "abc"}, {"a", "bc"}, {"ab", "c"}, {"abc", ""}, {strings.Repeat("s", 40), "k"}, {strings.Repeat("s", 39), "sk"},
	} {
		k := idemgrpc.GuardKey(g, sk[0], sk[1])
		if len(k) > 40 || seen[k] {
			t.Errorf("GuardKey(%q, %q) = %q: too long or shared", sk[0], sk[1], k)
		}
		seen[k] = true
	}
}
