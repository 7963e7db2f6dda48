package grpcstores_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
	"github.com/idemgo/idem/idemotel"
	"github.com/idemgo/idem/idemtest"
)

// A gRPC call's Guard spans are children of the span in the call's
// context, which an otelgrpc server handler (or any interceptor before
// idemgrpc's) starts: claim, run and complete of the first call, and the
// replay of the retry, each under its own call's span.
func TestGRPCCallSpans(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tel, err := idemotel.New(idemotel.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	g := idemtest.Guard(t, idemtest.MemStore(t), idem.Config{Namespace: "payments", Observer: tel.Observe})
	icpt := idemgrpc.UnaryServerInterceptor(g, idemgrpc.WithSharedScope())
	var runs atomic.Int32
	call := func() string {
		ctx, span := tp.Tracer("test").Start(context.Background(), "payments.Payments/Charge")
		defer span.End()
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("idempotency-key", "charge-1"))
		_, err := icpt(ctx, wrapperspb.String("1"), &grpc.UnaryServerInfo{FullMethod: "/payments.Payments/Charge"},
			func(context.Context, any) (any, error) {
				runs.Add(1)
				return wrapperspb.String("charged"), nil
			})
		if err != nil {
			t.Fatal(err)
		}
		return span.SpanContext().SpanID().String()
	}
	first, retry := call(), call()
	if runs.Load() != 1 {
		t.Fatalf("the handler ran %d times, want 1", runs.Load())
	}
	byParent := map[string][]string{}
	for _, sp := range spans.Ended() {
		if strings.HasPrefix(sp.Name(), "idem ") {
			byParent[sp.Parent().SpanID().String()] = append(byParent[sp.Parent().SpanID().String()], sp.Name())
		}
	}
	got := strings.Join(byParent[first], ",")
	if !strings.Contains(got, "idem claim") || !strings.Contains(got, "idem run") || !strings.Contains(got, "idem complete") {
		t.Errorf("the first call's span has idem children %q, want claim, run and complete", got)
	}
	if got := byParent[retry]; len(got) == 0 {
		t.Errorf("the retry's span has no idem child; idem spans by parent: %v", byParent)
	}
	if len(byParent) != 2 {
		t.Errorf("idem spans under %d parents, want the two calls' spans: %v", len(byParent), byParent)
	}
}
