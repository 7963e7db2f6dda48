package idemgrpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/adapter"
)

// Interceptor makes unary RPCs idempotent with an [idem.Guard]. Create one
// with [New]; [UnaryServerInterceptor] does both steps.
type Interceptor struct {
	o     options
	reads sync.Map // full method name → bool: declared NO_SIDE_EFFECTS
}

// New returns an Interceptor over g. It fails when g is nil, an option is
// invalid, or neither [WithScope] nor [WithSharedScope] is given.
//
// Waiting for a concurrent call's outcome is the Guard's: with Config.Wait
// set, a call whose key is in progress waits up to that long and gets the
// replay, else codes.Aborted at once. So are the key's length and format
// (Config.MaxKeyLen, Config.ValidateKey) and fail-open (Config.FailOpen:
// the handler runs unguarded when the store cannot be reached).
func New(g *idem.Guard, opts ...Option) (*Interceptor, error) {
	i := &Interceptor{}
	if err := i.o.build(g, opts); err != nil {
		return nil, err
	}
	return i, nil
}

// UnaryServerInterceptor returns the unary interceptor of [New](g, opts...).
// It panics with New's error when New fails, as the server is being built:
// a misconfigured interceptor stops the program at start-up rather than
// answering every call with an error, and never sends its configuration
// to remote clients. Call New to handle the error instead.
func UnaryServerInterceptor(g *idem.Guard, opts ...Option) grpc.UnaryServerInterceptor {
	return mustNew(g, opts).Unary()
}

// mustNew returns New(g, opts...), or panics with its error.
func mustNew(g *idem.Guard, opts []Option) *Interceptor {
	i, err := New(g, opts...)
	if err != nil {
		panic(err)
	}
	return i
}

// Unary returns the interceptor as a [grpc.UnaryServerInterceptor].
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor { return i.intercept }

// ReplayedTrailer is the trailer set to "true" on every replayed outcome.
const ReplayedTrailer = "idempotent-replayed"

// DefaultFingerprint is the default payload of a call (see
// [WithFingerprint]): its full method, length-prefixed, then the request's
// deterministic protobuf encoding. It fails for a request that is not a
// [proto.Message].
func DefaultFingerprint(fullMethod string, req any) ([]byte, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("idemgrpc: the request of %s is a %T, not a proto.Message: use WithFingerprint", fullMethod, req)
	}
	b := make([]byte, 0, binary.MaxVarintLen64+len(fullMethod)+proto.Size(m))
	b = binary.AppendUvarint(b, uint64(len(fullMethod)))
	b = append(b, fullMethod...)
	return proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, m)
}

func (i *Interceptor) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	var covered bool
	if err := i.o.Protect(ctx, "the method filter (WithMethods)", func() { covered = i.covers(info.FullMethod) }); err != nil {
		return nil, panicked(err)
	}
	if !covered {
		return handler(ctx, req)
	}
	key, err := i.o.Key(metadata.ValueFromIncomingContext(ctx, i.o.key), nil)
	switch {
	case err != nil:
		return nil, status.Error(codes.InvalidArgument, "idemgrpc: "+err.Error())
	case key == "":
		return handler(ctx, req)
	}
	var scope string
	if err := i.o.Protect(ctx, "the scope function (WithScope)", func() { scope = i.o.Scope(ctx) }); err != nil {
		return nil, panicked(err)
	}
	var payload []byte
	if perr := i.o.Protect(ctx, "the fingerprint function (WithFingerprint)", func() { payload, err = i.o.fingerprint(info.FullMethod, req) }); perr != nil {
		return nil, panicked(perr)
	}
	if err != nil {
		i.o.Logger().ErrorContext(ctx, "idemgrpc: fingerprint failed", slog.String("method", info.FullMethod), slog.Any("error", err))
		return nil, status.Error(codes.Internal, "idemgrpc: the request cannot be fingerprinted")
	}

	var (
		ran  bool
		resp any
		herr error
	)
	res, err := i.o.Guard().DoScoped(ctx, scope, key, payload, func(ctx context.Context) ([]byte, error) {
		ran = true
		resp, herr = handler(ctx, req)
		return i.outcome(resp, herr)
	})
	if ran {
		i.o.Ran(ctx, err, slog.String("method", info.FullMethod))
		if pe, ok := errors.AsType[*idem.PermanentError](herr); ok {
			herr = pe.Err // the handler marked it: the client gets the error itself
		}
		return resp, herr
	}
	if err == nil {
		m, derr := DecodeResponse(res.Value, i.o.types)
		if derr != nil {
			i.o.Logger().ErrorContext(ctx, "idemgrpc: stored response cannot be replayed",
				slog.String("method", info.FullMethod), slog.Any("error", derr))
			return nil, status.Error(codes.Internal, "idemgrpc: the stored response cannot be replayed")
		}
		setReplayed(ctx)
		return m, nil
	}
	return nil, i.failed(ctx, err)
}

// panicked is the status of a call for which a function the user gave
// panicked (adapter.Protect's error, logged): Internal, naming the
// function, not what it panicked with.
func panicked(err error) error {
	fn := "a function"
	if fp, ok := errors.AsType[*adapter.FuncPanic](err); ok {
		fn = fp.Func
	}
	return status.Error(codes.Internal, "idemgrpc: "+fn+" panicked")
}

// covers reports whether the interceptor applies to the method: the
// WithMethods function's answer, or by default every method whose proto
// does not declare it a read (idempotency_level NO_SIDE_EFFECTS).
func (i *Interceptor) covers(fullMethod string) bool {
	if i.o.methods != nil {
		return i.o.methods(fullMethod)
	}
	if read, ok := i.reads.Load(fullMethod); ok {
		return !read.(bool)
	}
	read := declaredRead(fullMethod)
	i.reads.Store(fullMethod, read)
	return !read
}

// declaredRead reports whether the method "/pkg.Service/Method" is
// registered in protoregistry.GlobalFiles with idempotency_level
// NO_SIDE_EFFECTS.
func declaredRead(fullMethod string) bool {
	name := strings.Replace(strings.TrimPrefix(fullMethod, "/"), "/", ".", 1)
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return false
	}
	m, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return false
	}
	opts, ok := m.Options().(*descriptorpb.MethodOptions)
	return ok && opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS
}

// StreamServerInterceptor returns the stream interceptor of [New](g,
// opts...): see [Interceptor.Stream]. Like [UnaryServerInterceptor], it
// panics with New's error when New fails.
func StreamServerInterceptor(g *idem.Guard, opts ...Option) grpc.StreamServerInterceptor {
	return mustNew(g, opts).Stream()
}

// Stream returns the interceptor of streaming calls. A streaming call has
// no single request to fingerprint before the handler runs, nor a single
// response to store, so it cannot be made idempotent: a covered streaming
// call that carries a key is refused with codes.Unimplemented, so that a
// client that asks for idempotency never silently goes without it. Calls
// without a key, and methods WithMethods leaves out, pass through.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if len(metadata.ValueFromIncomingContext(ss.Context(), i.o.key)) == 0 {
			return handler(srv, ss)
		}
		var covered bool
		if err := i.o.Protect(ss.Context(), "the method filter (WithMethods)", func() { covered = i.covers(info.FullMethod) }); err != nil {
			return panicked(err)
		}
		if !covered {
			return handler(srv, ss)
		}
		return status.Errorf(codes.Unimplemented,
			"idemgrpc: %s is a streaming method, which cannot be made idempotent: do not send the %s metadata with it (make the mutation a unary method)",
			info.FullMethod, i.o.key)
	}
}

// outcome is what the Guard stores for the handler's answer: the encoded
// response; a permanent status (idem.Permanent); or, for a retryable error
// or a response that cannot be stored, an error that releases the key.
func (i *Interceptor) outcome(resp any, herr error) ([]byte, error) {
	if herr == nil {
		m, ok := resp.(proto.Message)
		if !ok {
			return nil, &adapter.NotStored{Reason: fmt.Sprintf("the response is a %T, not a proto.Message", resp)}
		}
		v, err := EncodeResponse(m)
		if err != nil {
			return nil, &adapter.NotStored{Reason: "the response cannot be encoded", Err: err}
		}
		return v, nil
	}
	cause := herr
	pe, marked := errors.AsType[*idem.PermanentError](herr)
	if marked {
		cause = pe.Err
	}
	st := status.Convert(cause)
	if marked || i.o.permanent[st.Code()] {
		return nil, idem.Permanent(&permanentStatus{st})
	}
	return nil, herr
}

// refusals answer a call the Guard did not run the handler for, by the
// class of the Guard's error; the key's name replaces %s.
var refusals = map[adapter.Class]*status.Status{
	adapter.KeyReused:       status.New(codes.InvalidArgument, "idemgrpc: the %s was used with a different request; use a new key for a new request"),
	adapter.InProgress:      status.New(codes.Aborted, "idemgrpc: a call with the same %s is in progress; retry later with the same key"),
	adapter.InvalidKey:      status.New(codes.InvalidArgument, "idemgrpc: the %s, or the caller's scope, is not accepted"),
	adapter.TooManyAttempts: status.New(codes.FailedPrecondition, "idemgrpc: calls with this %s failed too many times; it will not be processed again"),
	adapter.TooLarge:        status.New(codes.AlreadyExists, "idemgrpc: the first call with this %s succeeded, but its response was too large to keep; it will not be processed again"),
	adapter.Unavailable:     status.New(codes.Unavailable, "idemgrpc: idempotency cannot be ensured right now; retry later with the same key"),
	adapter.Retryable:       status.New(codes.Internal, "idemgrpc: internal error"),
}

// failed returns the status of a call the Guard did not run the handler
// for.
func (i *Interceptor) failed(ctx context.Context, err error) error {
	c := adapter.Classify(err)
	switch {
	case c == adapter.StoredFailure:
		setReplayed(ctx)
		pe, _ := errors.AsType[*idem.PermanentError](err)
		return replayedStatus(pe).Err()
	case c == adapter.TooManyAttempts || c == adapter.TooLarge:
		setReplayed(ctx)
	case c == adapter.Unavailable:
		i.o.Logger().WarnContext(ctx, "idemgrpc: store unavailable", slog.Any("error", err))
	case ctx.Err() != nil && (c == adapter.Ended || c == adapter.Retryable):
		return status.FromContextError(ctx.Err()).Err()
	case c == adapter.Retryable, c == adapter.Refused:
		i.o.Logger().ErrorContext(ctx, "idemgrpc: unexpected error", slog.Any("error", err))
	}
	st, ok := refusals[c]
	if !ok {
		st = refusals[adapter.Retryable]
	}
	return status.Error(st.Code(), strings.Replace(st.Message(), "%s", i.o.key, 1))
}

func setReplayed(ctx context.Context) {
	// Fails only outside a gRPC server (a direct call in a test): nothing
	// to tell then.
	_ = grpc.SetTrailer(ctx, metadata.Pairs(ReplayedTrailer, "true"))
}
