package idemgrpc_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/memstore"
)

// BenchmarkInterceptor measures the interceptor over memstore, called
// directly as gRPC calls it: a call without a key (passed through), a first
// call (claim, run, complete) and a replay.
func BenchmarkInterceptor(b *testing.B) {
	store, err := memstore.New(memstore.Config{MaxEntries: 1 << 24})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	g := idemtest.Guard(b, store, idem.Config{})
	i, err := idemgrpc.New(g, idemgrpc.WithSharedScope())
	if err != nil {
		b.Fatal(err)
	}
	icpt := i.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: "/payments.v1.Payments/Charge"}
	req := wrapperspb.String(`{"amount":1000,"currency":"eur","customer":"cus_8e03978e40d5"}`)
	handler := func(context.Context, any) (any, error) { return wrapperspb.String("ch_1 succeeded"), nil }
	var seq atomic.Int64
	run := func(b *testing.B, key func() string) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				md := metadata.MD{}
				if k := key(); k != "" {
					md["idempotency-key"] = []string{k}
				}
				if _, err := icpt(metadata.NewIncomingContext(context.Background(), md), req, info, handler); err != nil {
					b.Error(err)
				}
			}
		})
	}
	b.Run("no-key", func(b *testing.B) { run(b, func() string { return "" }) })
	b.Run("first", func(b *testing.B) { run(b, func() string { return "k" + strconv.FormatInt(seq.Add(1), 10) }) })
	b.Run("replay", func(b *testing.B) { run(b, func() string { return "same" }) })
}
