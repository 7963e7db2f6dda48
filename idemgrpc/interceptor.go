package idemgrpc

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemgo/idem"
)

// Interceptor makes unary RPCs idempotent with an [idem.Guard]. Create one
// with [New]; [UnaryServerInterceptor] does both steps.
type Interceptor struct {
	g              *idem.Guard
	o              options
	guardMaxKeyLen int
}

// New returns an Interceptor over g. It fails when g is nil, an option is
// invalid, or g cannot hold the interceptor's keys: g's Config.MaxKeyLen
// must be at least 33 (the length of a hashed scoped key) and its
// Config.ValidateKey unset, since it would see scoped keys rather than the
// client's.
//
// Waiting for a concurrent call's outcome is the Guard's: with Config.Wait
// set, a call whose key is in progress waits up to that long and gets the
// replay, else codes.Aborted at once.
func New(g *idem.Guard, opts ...Option) (*Interceptor, error) {
	if g == nil {
		return nil, errors.New("idemgrpc: New: Guard is nil")
	}
	i := &Interceptor{g: g}
	if err := i.o.build(opts); err != nil {
		return nil, err
	}
	cfg := g.Config()
	if cfg.MaxKeyLen < minGuardKeyLen {
		return nil, fmt.Errorf("idemgrpc: New: the Guard's Config.MaxKeyLen %d is below %d, the length of a hashed key", cfg.MaxKeyLen, minGuardKeyLen)
	}
	if cfg.ValidateKey != nil {
		return nil, errors.New("idemgrpc: New: the Guard's Config.ValidateKey is set, but it would see scoped keys, not the client's: use WithKeyValidator")
	}
	i.guardMaxKeyLen = cfg.MaxKeyLen
	if i.o.logger == nil {
		i.o.logger = cfg.Logger
	}
	return i, nil
}

// UnaryServerInterceptor returns the unary interceptor of [New](g, opts...).
// If New fails, every call through the returned interceptor fails with
// codes.Internal and New's error as the message: call New to see the error
// at start-up.
func UnaryServerInterceptor(g *idem.Guard, opts ...Option) grpc.UnaryServerInterceptor {
	i, err := New(g, opts...)
	if err != nil {
		st := status.New(codes.Internal, err.Error())
		return func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
			return nil, st.Err()
		}
	}
	return i.Unary()
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

// errNotStored is the Guard fn's error for a successful response that
// cannot be stored: the Guard releases the key.
type errNotStored struct{ err error }

func (e *errNotStored) Error() string { return "idemgrpc: response not stored: " + e.err.Error() }
func (e *errNotStored) Unwrap() error { return e.err }

func (i *Interceptor) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if i.o.methods != nil && !i.o.methods(info.FullMethod) {
		return handler(ctx, req)
	}
	values := metadata.ValueFromIncomingContext(ctx, i.o.key)
	if len(values) == 0 {
		if i.o.required {
			return nil, status.Errorf(codes.InvalidArgument, "idemgrpc: this method requires the %s metadata", i.o.key)
		}
		return handler(ctx, req)
	}
	key, err := i.checkKey(values)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	payload, err := i.o.fingerprint(info.FullMethod, req)
	if err != nil {
		i.o.logger.ErrorContext(ctx, "idemgrpc: fingerprint failed", slog.String("method", info.FullMethod), slog.Any("error", err))
		return nil, status.Error(codes.Internal, "idemgrpc: the request cannot be fingerprinted")
	}
	scope := ""
	if i.o.scope != nil {
		scope = i.o.scope(ctx)
	}

	var (
		ran  bool
		resp any
		herr error
	)
	res, err := i.g.Do(ctx, guardKey(i.guardMaxKeyLen, scope, key), payload, func(ctx context.Context) ([]byte, error) {
		ran = true
		resp, herr = handler(ctx, req)
		return i.outcome(resp, herr)
	})
	if ran {
		if _, ok := errors.AsType[*errNotStored](err); ok {
			i.o.logger.WarnContext(ctx, "idemgrpc: response served but not stored: a retry runs the handler again",
				slog.String("method", info.FullMethod), slog.Any("error", err))
		} else if errors.Is(err, idem.ErrStoreUnavailable) || errors.Is(err, idem.ErrLeaseLost) {
			i.o.logger.WarnContext(ctx, "idemgrpc: outcome not stored: a retry may run the handler again",
				slog.String("method", info.FullMethod), slog.Any("error", err))
		}
		if pe, ok := errors.AsType[*idem.PermanentError](herr); ok {
			herr = pe.Err // the handler marked it: the client gets the error itself
		}
		return resp, herr
	}
	if err == nil {
		m, derr := DecodeResponse(res.Value, i.o.types)
		if derr != nil {
			i.o.logger.ErrorContext(ctx, "idemgrpc: stored response cannot be replayed",
				slog.String("method", info.FullMethod), slog.Any("error", derr))
			return nil, status.Error(codes.Internal, "idemgrpc: the stored response cannot be replayed")
		}
		setReplayed(ctx)
		return m, nil
	}
	return i.failed(ctx, err, req, handler)
}

func (i *Interceptor) checkKey(values []string) (string, error) {
	switch key := values[0]; {
	case len(values) > 1:
		return "", fmt.Errorf("idemgrpc: the %s metadata is sent %d times; send it once", i.o.key, len(values))
	case key == "":
		return "", fmt.Errorf("idemgrpc: the %s metadata is empty", i.o.key)
	case len(key) > i.o.maxKeyLen:
		return "", fmt.Errorf("idemgrpc: the %s is %d bytes long, longer than %d", i.o.key, len(key), i.o.maxKeyLen)
	case i.o.validateKey != nil:
		if err := i.o.validateKey(key); err != nil {
			return "", fmt.Errorf("idemgrpc: invalid %s: %w", i.o.key, err)
		}
	}
	return values[0], nil
}

// outcome is what the Guard stores for the handler's answer: the encoded
// response; a permanent status (idem.Permanent); or, for a retryable error
// or a response that cannot be stored, an error that releases the key.
func (i *Interceptor) outcome(resp any, herr error) ([]byte, error) {
	if herr == nil {
		m, ok := resp.(proto.Message)
		if !ok {
			return nil, &errNotStored{fmt.Errorf("the response is a %T, not a proto.Message", resp)}
		}
		v, err := EncodeResponse(m)
		if err != nil {
			return nil, &errNotStored{err}
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

// failed answers a call the Guard did not run the handler for.
func (i *Interceptor) failed(ctx context.Context, err error, req any, handler grpc.UnaryHandler) (any, error) {
	if pe, ok := errors.AsType[*idem.PermanentError](err); ok && pe.Replayed {
		setReplayed(ctx)
		return nil, replayedStatus(pe).Err()
	}
	switch {
	case errors.Is(err, idem.ErrKeyReused):
		return nil, status.Errorf(codes.InvalidArgument, "idemgrpc: the %s was used with a different request; use a new key for a new request", i.o.key)
	case errors.Is(err, idem.ErrInProgress):
		return nil, status.Errorf(codes.Aborted, "idemgrpc: a call with the same %s is in progress; retry later with the same key", i.o.key)
	case errors.Is(err, idem.ErrInvalidKey):
		return nil, status.Errorf(codes.InvalidArgument, "idemgrpc: the %s is not accepted", i.o.key)
	case errors.Is(err, idem.ErrStoreUnavailable) && i.o.failOpen:
		i.o.logger.WarnContext(ctx, "idemgrpc: store unavailable, running the handler without idempotency (fail open)", slog.Any("error", err))
		return handler(ctx, req)
	case errors.Is(err, idem.ErrStoreUnavailable):
		i.o.logger.WarnContext(ctx, "idemgrpc: store unavailable", slog.Any("error", err))
		return nil, status.Error(codes.Unavailable, "idemgrpc: idempotency cannot be ensured right now; retry later with the same key")
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	i.o.logger.ErrorContext(ctx, "idemgrpc: unexpected error", slog.Any("error", err))
	return nil, status.Error(codes.Internal, "idemgrpc: internal error")
}

func setReplayed(ctx context.Context) {
	// Fails only outside a gRPC server (a direct call in a test): nothing
	// to tell then.
	_ = grpc.SetTrailer(ctx, metadata.Pairs(ReplayedTrailer, "true"))
}

// Guard keys: the same two forms as package idemhttp's (adapters do not
// import each other), told apart by their first byte:
//
//	0x00 uvarint(len(scope)) scope key     when that fits the Guard's MaxKeyLen
//	0x01 SHA-256(uvarint(len(scope)) scope key)   otherwise (33 bytes)
const minGuardKeyLen = 1 + sha256.Size

// GuardKey returns the key the interceptor passes to g.Do for the
// idempotency key key sent by a client of scope ("" without [WithScope]).
// Use it with g.StoreKey to inspect or delete a client's record.
func GuardKey(g *idem.Guard, scope, key string) string {
	return guardKey(g.Config().MaxKeyLen, scope, key)
}

func guardKey(maxLen int, scope, key string) string {
	var n [binary.MaxVarintLen64]byte
	prefix := binary.PutUvarint(n[:], uint64(len(scope)))
	if size := 1 + prefix + len(scope) + len(key); size <= maxLen {
		b := make([]byte, 0, size)
		b = append(b, 0x00)
		b = append(b, n[:prefix]...)
		b = append(b, scope...)
		return string(append(b, key...))
	}
	h := sha256.New()
	h.Write(n[:prefix])
	h.Write([]byte(scope))
	h.Write([]byte(key))
	return string(h.Sum([]byte{0x01}))
}
