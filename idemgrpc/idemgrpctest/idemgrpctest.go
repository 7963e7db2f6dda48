// Package idemgrpctest holds the behaviour suite of package idemgrpc's
// interceptor, run over any [storage.Store], so every store module can check
// that the interceptor works over it:
//
//	func TestGRPC(t *testing.T) {
//		idemgrpctest.Run(t, func(t *testing.T) storage.Store { return newStore(t) })
//	}
//
// Each case is a parallel subtest with a Guard of its own in a random
// namespace, so newStore may return one shared store. The calls go through
// a gRPC server and client over an in-memory connection (bufconn).
package idemgrpctest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	"github.com/idemgo/idem/internal/adaptertest"
	"github.com/idemgo/idem/storage"
)

// Run runs the suite against the stores newStore returns.
func Run(t *testing.T, newStore func(t *testing.T) storage.Store) {
	adaptertest.Run(t, newStore, cases)
}

var cases = []adaptertest.Case{
	{"RetryReplaysFirstResponse", retryReplays},
	{"OtherMethodsPassThrough", otherMethodsPassThrough},
	{"MissingKeyPassesThrough", missingKeyPassesThrough},
	{"MissingKeyRequired", missingKeyRequired},
	{"InvalidKeysRefused", invalidKeysRefused},
	{"KeyReusedWithAnotherRequest", keyReused},
	{"ConcurrentWithWaitRunOnce", concurrentWithWait},
	{"ConcurrentWithoutWaitAborted", concurrentWithoutWait},
	{"PermanentErrorReplayed", permanentErrorReplayed},
	{"RetryableErrorReleased", retryableErrorReleased},
	{"PermanentCodesAndMarkedErrors", permanentCodesAndMarked},
	{"PanicReleases", panicReleases},
	{"ScopesNeverCross", scopesNeverCross},
	{"TooManyAttempts", tooManyAttempts},
	{"TokenInHandlerContext", tokenInContext},
	{"UnreplayableStoredValues", unreplayableStored},
	{"ResponseTooLargeRunsOnce", responseTooLarge},
	{"KeyedStreamRefused", keyedStreamRefused},
}

// newGuard returns a Guard over s in a namespace of its own, closed at the
// end of the test.
var newGuard = adaptertest.NewGuard

// account is the scope of a call in the suite: its "account" metadata, as
// an authentication interceptor would establish it.
func account(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	return strings.Join(md.Get("account"), "")
}

// interceptor returns the unary interceptor over g, scoped by account.
func interceptor(t *testing.T, g *idem.Guard, opts ...idemgrpc.Option) grpc.UnaryServerInterceptor {
	t.Helper()
	i, err := idemgrpc.New(g, append([]idemgrpc.Option{idemgrpc.WithScope(account)}, opts...)...)
	if err != nil {
		t.Fatalf("idemgrpc.New: %v", err)
	}
	return i.Unary()
}

// The tiny service under test, registered by hand: Charge and Refund take
// and return a StringValue.
const (
	chargeMethod = "/idemgrpc.test.Payments/Charge"
	refundMethod = "/idemgrpc.test.Payments/Refund"
)

// payments counts its runs and answers "charged <request>", or what handle
// answers when set.
type payments struct {
	runs   atomic.Int32
	handle func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
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
			return p.handle(ctx, req.(*wrapperspb.StringValue))
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: method}, h)
	}
}

// serve starts the service behind icpt on a bufconn and returns a client
// connection to it, both closed at the end of the test.
func serve(t *testing.T, p *payments, icpt grpc.UnaryServerInterceptor) *grpc.ClientConn {
	t.Helper()
	return serveWith(t, p, grpc.UnaryInterceptor(icpt))
}

// watchStream is the service's streaming method: it sends one message
// naming its run.
var watchStream = grpc.StreamDesc{StreamName: "Watch", ServerStreams: true, ClientStreams: true}

const watchMethod = "/idemgrpc.test.Payments/Watch"

// serveWith is serve with the server's interceptors given as options.
func serveWith(t *testing.T, p *payments, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(opts...)
	watch := watchStream
	watch.Handler = func(_ any, ss grpc.ServerStream) error {
		return ss.SendMsg(wrapperspb.String(fmt.Sprintf("watch %d", p.runs.Add(1))))
	}
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "idemgrpc.test.Payments",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Charge", Handler: p.call(chargeMethod)},
			{MethodName: "Refund", Handler: p.call(refundMethod)},
		},
		Streams: []grpc.StreamDesc{watch},
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
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return conn
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

// want checks a call's response, code and whether it is a replay.
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

func retryReplays(t *testing.T, s storage.Store) {
	p := &payments{}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{})))
	want(t, "first", charge(conn, "k1", "10"), "charged 10", codes.OK, false)
	want(t, "retry", charge(conn, "k1", "10"), "charged 10", codes.OK, true)
	want(t, "another key", charge(conn, "k2", "10"), "charged 10", codes.OK, false)
	wantRuns(t, p, 2)
}

func otherMethodsPassThrough(t *testing.T, s storage.Store) {
	p := &payments{}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{}), idemgrpc.WithMethods(func(m string) bool { return m == chargeMethod })))
	want(t, "refund", invoke(conn, refundMethod, "1", "idempotency-key", "k"), "charged 1", codes.OK, false)
	want(t, "refund again", invoke(conn, refundMethod, "1", "idempotency-key", "k"), "charged 1", codes.OK, false)
	want(t, "charge", charge(conn, "k", "1"), "charged 1", codes.OK, false)
	want(t, "charge again", charge(conn, "k", "1"), "charged 1", codes.OK, true)
	wantRuns(t, p, 3)
}

func missingKeyPassesThrough(t *testing.T, s storage.Store) {
	p := &payments{}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{})))
	want(t, "no key", invoke(conn, chargeMethod, "1"), "charged 1", codes.OK, false)
	want(t, "no key again", invoke(conn, chargeMethod, "1"), "charged 1", codes.OK, false)
	wantRuns(t, p, 2)
}

func missingKeyRequired(t *testing.T, s storage.Store) {
	p := &payments{}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{}), idemgrpc.WithRequired()))
	want(t, "no key", invoke(conn, chargeMethod, "1"), "", codes.InvalidArgument, false)
	wantRuns(t, p, 0)
	want(t, "with key", charge(conn, "k", "1"), "charged 1", codes.OK, false)
	wantRuns(t, p, 1)
}

func invalidKeysRefused(t *testing.T, s storage.Store) {
	p := &payments{}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{MaxKeyLen: 36, ValidateKey: func(k string) error {
		if strings.HasPrefix(k, "bad") {
			return errors.New("must not start with bad")
		}
		return nil
	}})))
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

func keyReused(t *testing.T, s storage.Store) {
	p := &payments{}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{})))
	want(t, "first", charge(conn, "k", "10"), "charged 10", codes.OK, false)
	want(t, "another request", charge(conn, "k", "11"), "", codes.InvalidArgument, false)
	want(t, "another method", invoke(conn, refundMethod, "10", "idempotency-key", "k"), "", codes.InvalidArgument, false)
	want(t, "the first again", charge(conn, "k", "10"), "charged 10", codes.OK, true)
	wantRuns(t, p, 1)
}

func concurrentWithWait(t *testing.T, s storage.Store) {
	const n = 50
	var arrived atomic.Int32
	all := make(chan struct{})
	// The handler holds the key until every call has reached the
	// interceptor, so most of them find it in progress and wait.
	p := &payments{handle: func(ctx context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		select {
		case <-all:
		case <-ctx.Done():
		}
		return wrapperspb.String("done"), nil
	}}
	icpt := interceptor(t, newGuard(t, s, idem.Config{Wait: 20 * time.Second}))
	conn := serve(t, p, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if arrived.Add(1) == n {
			close(all)
		}
		return icpt(ctx, req, info, h)
	})
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

func concurrentWithoutWait(t *testing.T, s storage.Store) {
	entered, release := make(chan struct{}), make(chan struct{})
	p := &payments{handle: func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		close(entered)
		<-release
		return wrapperspb.String("done"), nil
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{})))
	first := make(chan result)
	go func() { first <- charge(conn, "k", "1") }()
	<-entered
	want(t, "while in progress", charge(conn, "k", "1"), "", codes.Aborted, false)
	close(release)
	want(t, "first", <-first, "done", codes.OK, false)
	want(t, "after", charge(conn, "k", "1"), "done", codes.OK, true)
	wantRuns(t, p, 1)
}

func permanentErrorReplayed(t *testing.T, s storage.Store) {
	// A status with a detail, as handlers return.
	detail, err := anypb.New(wrapperspb.String("order 42"))
	if err != nil {
		t.Fatalf("anypb.New: %v", err)
	}
	st := status.FromProto(&spb.Status{Code: int32(codes.NotFound), Message: "no such order", Details: []*anypb.Any{detail}})
	p := &payments{handle: func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, st.Err()
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{})))
	want(t, "first", charge(conn, "k", "1"), "", codes.NotFound, false)
	again := charge(conn, "k", "1")
	want(t, "retry", again, "", codes.NotFound, true)
	if got := status.Convert(again.err).Proto(); !proto.Equal(got, st.Proto()) {
		t.Errorf("replayed status %v, want %v", got, st.Proto())
	}
	wantRuns(t, p, 1)
}

func retryableErrorReleased(t *testing.T, s storage.Store) {
	var fail atomic.Bool
	fail.Store(true)
	p := &payments{handle: func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if fail.Swap(false) {
			return nil, status.Error(codes.Unavailable, "downstream down")
		}
		return wrapperspb.String("done"), nil
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{})))
	want(t, "first", charge(conn, "k", "1"), "", codes.Unavailable, false)
	want(t, "retry", charge(conn, "k", "1"), "done", codes.OK, false)
	want(t, "retry after success", charge(conn, "k", "1"), "done", codes.OK, true)
	wantRuns(t, p, 2)
}

func permanentCodesAndMarked(t *testing.T, s storage.Store) {
	p := &payments{handle: func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		switch in.GetValue() {
		case "exhausted":
			return nil, status.Error(codes.ResourceExhausted, "quota")
		case "notfound":
			return nil, status.Error(codes.NotFound, "none")
		}
		return nil, idem.Permanent(errors.New("card declined"))
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{}), idemgrpc.WithPermanentCodes(codes.ResourceExhausted)))
	want(t, "exhausted", charge(conn, "k1", "exhausted"), "", codes.ResourceExhausted, false)
	want(t, "exhausted again", charge(conn, "k1", "exhausted"), "", codes.ResourceExhausted, true)
	wantRuns(t, p, 1) // stored by WithPermanentCodes
	want(t, "notfound", charge(conn, "k2", "notfound"), "", codes.NotFound, false)
	want(t, "notfound again", charge(conn, "k2", "notfound"), "", codes.NotFound, false)
	wantRuns(t, p, 3) // no longer permanent
	want(t, "marked permanent", charge(conn, "k3", "marked"), "", codes.Unknown, false)
	again := charge(conn, "k3", "marked")
	want(t, "marked permanent again", again, "", codes.Unknown, true)
	if m := status.Convert(again.err).Message(); m != "card declined" {
		t.Errorf("replayed message %q, want %q", m, "card declined")
	}
	wantRuns(t, p, 4)
}

func panicReleases(t *testing.T, s storage.Store) {
	// Called directly, as gRPC calls it: a server would recover the panic
	// in its own goroutine.
	icpt := interceptor(t, newGuard(t, s, idem.Config{}))
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

func scopesNeverCross(t *testing.T, s storage.Store) {
	p := &payments{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		return wrapperspb.String(strings.Join(md.Get("account"), "") + ":" + in.GetValue()), nil
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{})))
	as := func(account, in string) result {
		return invoke(conn, chargeMethod, in, "idempotency-key", "k", "account", account)
	}
	want(t, "alice", as("alice", "1"), "alice:1", codes.OK, false)
	want(t, "bob", as("bob", "1"), "bob:1", codes.OK, false)
	want(t, "alice again", as("alice", "1"), "alice:1", codes.OK, true)
	want(t, "bob again", as("bob", "1"), "bob:1", codes.OK, true)
	wantRuns(t, p, 2)
}

func tooManyAttempts(t *testing.T, s storage.Store) {
	p := &payments{handle: func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, status.Error(codes.Internal, "bug")
	}}
	conn := serve(t, p, interceptor(t, newGuard(t, s, idem.Config{MaxAttempts: 1})))
	want(t, "attempt 1", charge(conn, "k", "1"), "", codes.Internal, false)
	want(t, "attempt 2", charge(conn, "k", "1"), "", codes.FailedPrecondition, true)
	wantRuns(t, p, 1)
}

func tokenInContext(t *testing.T, s storage.Store) {
	p := &payments{handle: func(ctx context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if tok, ok := idem.TokenFrom(ctx); !ok || tok == 0 {
			t.Errorf("idem.TokenFrom(handler's context) = %v, %v; want the lease token", tok, ok)
		}
		return wrapperspb.String("ok"), nil
	}}
	want(t, "call", charge(serve(t, p, interceptor(t, newGuard(t, s, idem.Config{}))), "k", "1"), "ok", codes.OK, false)
}

func unreplayableStored(t *testing.T, s storage.Store) {
	g := newGuard(t, s, idem.Config{})
	p := &payments{}
	fixed := func(string, any) ([]byte, error) { return []byte("fixed"), nil }
	conn := serve(t, p, interceptor(t, g, idemgrpc.WithFingerprint(fixed)))
	store := func(key string, v []byte) {
		if _, err := g.DoScoped(context.Background(), "", key, []byte("fixed"), func(context.Context) ([]byte, error) { return v, nil }); err != nil {
			t.Fatalf("storing a value under %q: %v", key, err)
		}
	}
	store("garbage", []byte("\x07garbage"))
	want(t, "garbage", charge(conn, "garbage", "1"), "", codes.Internal, false)
	unknown, err := idemgrpc.EncodeResponse(wrapperspb.String("x"))
	if err != nil {
		t.Fatalf("EncodeResponse: %v", err)
	}
	store("unknown type", unknown)
	noTypes := serve(t, p, interceptor(t, g, idemgrpc.WithFingerprint(fixed), idemgrpc.WithTypes(new(protoregistry.Types))))
	want(t, "unknown type", charge(noTypes, "unknown type", "1"), "", codes.Internal, false)
	want(t, "known type", charge(conn, "unknown type", "1"), "x", codes.OK, true)
	wantRuns(t, p, 0)
}

// A response the store cannot keep is served, and its key gets an outcome
// all the same: the retry is told the call succeeded and its response was
// not kept (AlreadyExists, replayed), and the handler runs once.
func responseTooLarge(t *testing.T, s storage.Store) {
	p := &payments{}
	conn := serve(t, p, interceptor(t, newGuard(t, adaptertest.LimitStore{Store: s, Max: 64}, idem.Config{})))
	big := strings.Repeat("x", 100)
	want(t, "first", charge(conn, "k", big), "charged "+big, codes.OK, false)
	again := charge(conn, "k", big)
	want(t, "retry", again, "", codes.AlreadyExists, true)
	if msg := status.Convert(again.err).Message(); !strings.Contains(msg, "too large") {
		t.Errorf("retry: message %q does not say the response was too large to keep", msg)
	}
	want(t, "a response that fits", charge(conn, "k2", "1"), "charged 1", codes.OK, false)
	want(t, "a response that fits, again", charge(conn, "k2", "1"), "charged 1", codes.OK, true)
	wantRuns(t, p, 2)
}

// A streaming call that carries a key is refused with a clear status,
// however often it comes: the interceptor cannot make it idempotent, so
// the handler never runs for it. Without a key it runs.
func keyedStreamRefused(t *testing.T, s storage.Store) {
	i, err := idemgrpc.New(newGuard(t, s, idem.Config{}), idemgrpc.WithScope(account))
	if err != nil {
		t.Fatal(err)
	}
	p := &payments{}
	conn := serveWith(t, p, grpc.UnaryInterceptor(i.Unary()), grpc.StreamInterceptor(i.Stream()))
	watch := func(md ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		st, err := conn.NewStream(metadata.AppendToOutgoingContext(ctx, md...), &watchStream, watchMethod)
		if err == nil {
			err = st.CloseSend()
		}
		if err == nil {
			err = st.RecvMsg(new(wrapperspb.StringValue))
		}
		return err
	}
	for n := range 2 {
		err := watch("idempotency-key", "k")
		if status.Code(err) != codes.Unimplemented || !strings.Contains(status.Convert(err).Message(), "streaming") {
			t.Errorf("keyed streaming call %d: %v, want Unimplemented saying streams cannot be idempotent", n, err)
		}
	}
	wantRuns(t, p, 0)
	if err := watch(); err != nil {
		t.Errorf("a streaming call without a key: %v", err)
	}
	wantRuns(t, p, 1)
}
