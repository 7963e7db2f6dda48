package idemgrpc_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgo/idem/idemgrpc"
)

func TestResponseRoundTrip(t *testing.T) {
	for _, m := range []proto.Message{wrapperspb.String("charged"), wrapperspb.String(""), durationpb.New(90e9)} {
		b, err := idemgrpc.EncodeResponse(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := idemgrpc.DecodeResponse(b, nil)
		if err != nil || !proto.Equal(got, m) {
			t.Errorf("round trip of %v = %v, %v", m, got, err)
		}
	}
}

func FuzzDecodeResponse(f *testing.F) {
	b, _ := idemgrpc.EncodeResponse(wrapperspb.String("charged"))
	f.Add(b)
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{1, 3, 'a', '.', 'b'})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := idemgrpc.DecodeResponse(b, nil)
		if err != nil {
			if !errors.Is(err, idemgrpc.ErrStoredResponse) {
				t.Fatalf("error %v does not wrap ErrStoredResponse", err)
			}
			return
		}
		if m == nil {
			t.Fatal("no message and no error")
		}
	})
}
