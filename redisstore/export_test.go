package redisstore

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/idemgo/idem"
)

// DecodeRecord exposes the decoder to the black-box tests.
func DecodeRecord(key string, v []byte) (idem.Record, error) { return decodeRecord(key, string(v), 0) }

// EncodeRecord is the Go mirror of the scripts' struct.pack, so the tests
// can hold the Lua encoder and the Go decoder to one format.
func EncodeRecord(r idem.Record, retention time.Duration) []byte {
	b := []byte{formatV1, byte(r.Status)}
	b = appendToken(b, r.Token)
	b = binary.BigEndian.AppendUint32(b, uint32(r.Attempt))
	var lease int64
	if !r.LeaseUntil.IsZero() {
		lease = r.LeaseUntil.UnixMicro()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(lease))
	b = binary.BigEndian.AppendUint64(b, uint64(micros(retention)))
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Fingerprint)))
	return append(append(b, r.Fingerprint...), r.Result...)
}

// ClaimWithToken claims with the token t, as the client does when it
// resends a claim whose reply it lost.
func (s *Store) ClaimWithToken(ctx context.Context, a idem.ClaimArgs, t idem.Token) (idem.Claim, error) {
	reply, err := s.run(ctx, s.cmd(ctx, claimScript, a.Key, s.claimArgs(a, t)...), false)
	if err != nil {
		return idem.Claim{}, unavailable("Claim", err)
	}
	return claimReply(a, t, reply)
}
