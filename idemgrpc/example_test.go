package idemgrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
	"github.com/idemgo/idem/memstore"
)

// A server whose unary calls are idempotent per caller. The recovery and
// auth interceptors, and the service, are the application's own.
func Example() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	g, err := idem.New(store, idem.Config{Namespace: "payments", Wait: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	idempotent, err := idemgrpc.New(g,
		idemgrpc.WithScope(func(ctx context.Context) string {
			md, _ := metadata.FromIncomingContext(ctx)
			return fmt.Sprint(md.Get("x-account")) // in real code: the authenticated principal
		}),
		idemgrpc.WithMethods(func(m string) bool { return m == "/payments.v1.Payments/Charge" }),
	)
	if err != nil {
		log.Fatal(err)
	}
	// Charge is guarded; reads (Get, List) pass through. A streaming call
	// that carries a key is refused: streams cannot be made idempotent.
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(idempotent.Unary()), grpc.ChainStreamInterceptor(idempotent.Stream()))
	// paymentspb.RegisterPaymentsServer(srv, &server{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	srv.GracefulStop()
}

// The interceptor called directly, as gRPC calls it: the retry is answered
// from the store.
func ExampleNew() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	g, _ := idem.New(store, idem.Config{})
	defer g.Close()
	i, err := idemgrpc.New(g, idemgrpc.WithSharedScope()) // one trusted caller
	if err != nil {
		log.Fatal(err)
	}
	charges := 0
	charge := func(ctx context.Context, req any) (any, error) {
		charges++
		if req.(*wrapperspb.StringValue).GetValue() == "" {
			return nil, status.Error(codes.InvalidArgument, "no amount")
		}
		return wrapperspb.String(fmt.Sprintf("charge %d", charges)), nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/payments.v1.Payments/Charge"}
	for _, c := range []struct{ key, amount string }{{"k1", "10"}, {"k1", "10"}, {"k1", "20"}, {"k2", ""}, {"k2", ""}} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", c.key))
		resp, err := i.Unary()(ctx, wrapperspb.String(c.amount), info, charge)
		out, _ := resp.(*wrapperspb.StringValue)
		fmt.Printf("%s %q -> %q %v\n", c.key, c.amount, out.GetValue(), status.Code(err))
	}
	fmt.Println("charges:", charges)
	// Output:
	// k1 "10" -> "charge 1" OK
	// k1 "10" -> "charge 1" OK
	// k1 "20" -> "" InvalidArgument
	// k2 "" -> "" InvalidArgument
	// k2 "" -> "" InvalidArgument
	// charges: 2
}
