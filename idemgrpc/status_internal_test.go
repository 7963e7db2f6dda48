package idemgrpc

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// The stored text of a permanent status decodes to the same status, and
// any other text to a status, never a panic.
func FuzzDecodeStatus(f *testing.F) {
	f.Add(int32(codes.NotFound), "no such order")
	f.Add(int32(0), "")
	f.Add(int32(99), "\xff")
	f.Fuzz(func(t *testing.T, code int32, msg string) {
		st := status.New(codes.Code(code), msg)
		if code != 0 {
			stored := storage.DecodeFailure(storage.EncodeFailure(idem.Permanent(&permanentStatus{st})))
			pe := &idem.PermanentError{Err: stored, Replayed: true}
			// A message that is not UTF-8 cannot be a protobuf string: it is
			// replayed made valid.
			want := status.New(codes.Code(code), strings.ToValidUTF8(msg, "\uFFFD"))
			if got := replayedStatus(pe); !proto.Equal(got.Proto(), want.Proto()) {
				t.Fatalf("replayed %v, want %v", got.Proto(), want.Proto())
			}
		}
		if got := decodeStatus(msg); got == nil || got.Code() == codes.OK {
			t.Fatalf("decodeStatus(%q) = %v", msg, got)
		}
		if got := decodeStatus(statusPrefix + msg); got == nil || got.Code() == codes.OK {
			t.Fatalf("decodeStatus(prefix+%q) = %v", msg, got)
		}
	})
}
