package idemgrpc

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemgo/idem"
)

// ErrStoredResponse: a stored response cannot be replayed: its bytes are
// not what [EncodeResponse] writes, or its message type is unknown to the
// type resolver. The interceptor answers codes.Internal.
var ErrStoredResponse = errors.New("idemgrpc: stored response cannot be replayed")

// The stored value of a response, version 1:
//
//	version(=1) uvarint(len(name)) name message…
//
// name is the message's full protobuf name, so a replay needs no run of the
// handler in this process to know the type; the marshalled message runs to
// the end of the value.
const responseVersion = 1

// EncodeResponse encodes m as the interceptor stores it: its full message
// name, then its wire encoding.
func EncodeResponse(m proto.Message) ([]byte, error) {
	name := m.ProtoReflect().Descriptor().FullName()
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(name)+proto.Size(m))
	b = append(b, responseVersion)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return nil, fmt.Errorf("idemgrpc: encoding the response: %w", err)
	}
	return b, nil
}

// DecodeResponse decodes a value written by [EncodeResponse] into a new
// message of the type it names, found with types (protoregistry.GlobalTypes
// when nil). It returns an error wrapping [ErrStoredResponse] for anything
// else and never panics.
func DecodeResponse(b []byte, types protoregistry.MessageTypeResolver) (proto.Message, error) {
	if types == nil {
		types = protoregistry.GlobalTypes
	}
	if len(b) == 0 || b[0] != responseVersion {
		return nil, fmt.Errorf("%w: unknown format", ErrStoredResponse)
	}
	n, size := binary.Uvarint(b[1:])
	if size <= 0 || n > uint64(len(b)-1-size) {
		return nil, fmt.Errorf("%w: truncated", ErrStoredResponse)
	}
	b = b[1+size:]
	name := protoreflect.FullName(b[:n])
	if !name.IsValid() {
		return nil, fmt.Errorf("%w: invalid message name %q", ErrStoredResponse, name)
	}
	mt, err := types.FindMessageByName(name)
	if err != nil {
		return nil, fmt.Errorf("%w: message type %s: %w", ErrStoredResponse, name, err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(b[n:], m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrStoredResponse, name, err)
	}
	return m, nil
}

// A permanent failure is stored by the Guard as its error's text only (see
// storage.EncodeFailure). permanentStatus's text is therefore the whole
// status, code, message and details, marshalled and base64-encoded after a
// prefix, so a replay gives the client the very same status.
const statusPrefix = "idemgrpc status v1 "

type permanentStatus struct{ st *status.Status }

func (e *permanentStatus) Error() string {
	b, err := proto.Marshal(e.st.Proto())
	if err != nil {
		// A message that is not UTF-8, or a detail that does not marshal:
		// keep the code and the message, made valid.
		b, _ = proto.Marshal(&spb.Status{Code: int32(e.st.Code()), Message: strings.ToValidUTF8(e.st.Message(), "\uFFFD")})
	}
	return statusPrefix + base64.RawStdEncoding.EncodeToString(b)
}

// replayedStatus turns a replayed permanent failure back into the status
// the handler returned first. It never fails: text it does not know
// becomes codes.Unknown with that text.
func replayedStatus(pe *idem.PermanentError) *status.Status {
	msg := ""
	if pe.Err != nil {
		msg = pe.Err.Error()
	}
	return decodeStatus(msg)
}

func decodeStatus(msg string) *status.Status {
	enc, ok := strings.CutPrefix(msg, statusPrefix)
	if !ok {
		return status.New(codes.Unknown, msg)
	}
	b, err := base64.RawStdEncoding.DecodeString(enc)
	var p spb.Status
	if err == nil {
		err = proto.Unmarshal(b, &p)
	}
	if err != nil || p.Code == int32(codes.OK) {
		return status.New(codes.Internal, "idemgrpc: the stored error cannot be replayed")
	}
	return status.FromProto(&p)
}
