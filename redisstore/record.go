package redisstore

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/idemgo/idem"
)

// The stored value of a record, big-endian, packed by the client and read
// here and by the Lua scripts:
//
//	off len field
//	  0   1 format version (formatV2)
//	  1   1 status (idem.Status)
//	  2   8 token (uint64; zero once released or failed by the attempt cap)
//	 10   4 attempt (uint32)
//	 14   8 the claim's retention in milliseconds
//	 22   2 fingerprint length n
//	 24   n fingerprint
//	24+n  … result (Completed: the value; Failed: the encoded cause)
//
// The expiry is not in the value: it is the key's own, set with PX or
// PEXPIRE on the Redis clock and read back with PEXPIRETIME. Neither is the
// lease end: while a record is InProgress its key expires the claim's
// retention after its lease ends, so the lease end is the expiry less the
// retention, and the lease is live while the key has more than the
// retention to live (PTTL). Times are whole milliseconds, as Redis keeps
// them. Format 1, which held the lease end in the value, was never
// released; its values are refused like any other unknown one.
const (
	formatV2  = 2
	headerLen = 24

	// maxFingerprint is the longest fingerprint the 16-bit length holds.
	maxFingerprint = 1<<16 - 1
)

var b64 = base64.RawURLEncoding

// redisKey returns the Redis key of the store key: the prefix, then the
// store key in unpadded base64url inside braces. The braces make the
// encoding the key's Redis Cluster hash tag, so a record is one slot; the
// encoding is injective and never contains a brace, so no store key can
// address another's record or move the hash tag, whatever bytes it holds
// (NUL, braces, invalid UTF-8). The prefix is checked for braces in New.
func appendRedisKey(dst []byte, prefix, key string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, '{')
	dst = b64.AppendEncode(dst, []byte(key))
	return append(dst, '}')
}

// decodeRecord parses the stored value v of key. expiresMs is the key's
// PEXPIRETIME (≤ 0: none known, and then neither is the lease end). It
// never panics: a value it does not know gives an error wrapping
// ErrUnknownFormat. The record's slices are fresh copies.
func decodeRecord(key, v string, expiresMs int64) (idem.Record, error) {
	if len(v) > 0 && v[0] != formatV2 {
		return idem.Record{}, fmt.Errorf("%w: version %d", ErrUnknownFormat, v[0])
	}
	if len(v) < headerLen {
		return idem.Record{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrUnknownFormat, len(v), headerLen)
	}
	var h [headerLen]byte
	copy(h[:], v)
	status := idem.Status(h[1])
	if status != idem.StatusInProgress && !status.Done() {
		return idem.Record{}, fmt.Errorf("%w: status %d", ErrUnknownFormat, h[1])
	}
	if ret := binary.BigEndian.Uint64(h[14:22]); ret == 0 || ret > uint64(maxDuration/time.Millisecond) {
		return idem.Record{}, fmt.Errorf("%w: retention %d ms", ErrUnknownFormat, ret)
	}
	fpEnd := headerLen + int(binary.BigEndian.Uint16(h[22:24]))
	if fpEnd > len(v) {
		return idem.Record{}, fmt.Errorf("%w: the fingerprint runs past the value's end", ErrUnknownFormat)
	}
	r := idem.Record{
		Key:         key,
		Status:      status,
		Token:       idem.Token(binary.BigEndian.Uint64(h[2:10])),
		Attempt:     int(binary.BigEndian.Uint32(h[10:14])),
		Fingerprint: []byte(v[headerLen:fpEnd]),
	}
	if fpEnd < len(v) {
		r.Result = []byte(v[fpEnd:])
	}
	if expiresMs > 0 {
		r.ExpiresAt = time.UnixMilli(expiresMs)
		if status == idem.StatusInProgress && r.Token != 0 {
			r.LeaseUntil = time.UnixMilli(expiresMs - int64(binary.BigEndian.Uint64(h[14:22])))
		}
	}
	return r, nil
}

// appendToken appends t as the 8 bytes the scripts compare.
func appendToken(dst []byte, t idem.Token) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(t))
}

// holderPrefix returns the first 10 bytes of the InProgress record whose
// current token is t, which the holder scripts compare.
func holderPrefix(t idem.Token) []byte {
	return appendToken(append(make([]byte, 0, 10), formatV2, byte(idem.StatusInProgress)), t)
}

// millis converts d to whole milliseconds, rounding up so that no
// positive duration becomes zero.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
