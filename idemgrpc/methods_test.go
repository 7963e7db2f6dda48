package idemgrpc_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc"
)

// readsFile declares a service whose Get is a read (NO_SIDE_EFFECTS) and
// whose Put is not, registered once in protoregistry.GlobalFiles as
// generated code registers its files.
var readsFile = func() error {
	read, idempotent := descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT
	fd := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("idemgrpc/test/reads.proto"),
		Package:    proto.String("idemgrpc.test"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/wrappers.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Get"), InputType: proto.String(".google.protobuf.StringValue"), OutputType: proto.String(".google.protobuf.StringValue"),
					Options: &descriptorpb.MethodOptions{IdempotencyLevel: &read}},
				{Name: proto.String("Put"), InputType: proto.String(".google.protobuf.StringValue"), OutputType: proto.String(".google.protobuf.StringValue"),
					Options: &descriptorpb.MethodOptions{IdempotencyLevel: &idempotent}},
			},
		}},
	}
	f, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		return err
	}
	return protoregistry.GlobalFiles.RegisterFile(f)
}()

// By default a method its proto declares a read (NO_SIDE_EFFECTS) is not
// guarded: each call runs, nothing is stored. Other methods are; and
// WithMethods decides alone.
func TestReadMethodsNotGuardedByDefault(t *testing.T) {
	if readsFile != nil {
		t.Fatal(readsFile)
	}
	g := newGuard(t, newStore(t), idem.Config{})
	byDefault, err := idemgrpc.New(g, idemgrpc.WithSharedScope())
	if err != nil {
		t.Fatal(err)
	}
	everything, err := idemgrpc.New(g, idemgrpc.WithSharedScope(), idemgrpc.WithMethods(func(string) bool { return true }))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method string
		icpt         grpc.UnaryServerInterceptor
		runs         int32
	}{
		{"read", "/idemgrpc.test.Orders/Get", byDefault.Unary(), 2},
		{"idempotent write", "/idemgrpc.test.Orders/Put", byDefault.Unary(), 1},
		{"undeclared", "/idemgrpc.test.Orders/Other", byDefault.Unary(), 1},
		{"read under WithMethods", "/idemgrpc.test.Orders/Get", everything.Unary(), 1},
	} {
		var runs atomic.Int32
		for range 2 {
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", tc.name))
			if _, err := tc.icpt(ctx, wrapperspb.String("1"), &grpc.UnaryServerInfo{FullMethod: tc.method}, func(context.Context, any) (any, error) {
				runs.Add(1)
				return wrapperspb.String("ok"), nil
			}); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		if runs.Load() != tc.runs {
			t.Errorf("%s: the handler ran %d times for two calls with one key, want %d", tc.name, runs.Load(), tc.runs)
		}
	}
}
