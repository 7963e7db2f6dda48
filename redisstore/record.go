package redisstore

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/idemgo/idem"
)

// The stored value of a record, big-endian, written by the Lua scripts with
// struct.pack('>BBc8I4i8i8I2') and read here:
//
//	off len field
//	  0   1 format version (formatV1)
//	  1   1 status (idem.Status)
//	  2   8 token (uint64; zero once released or failed by the attempt cap)
//	 10   4 attempt (uint32)
//	 14   8 lease end, Unix microseconds of the Redis clock (0: no lease)
//	 22   8 retention in microseconds (the claim's, then the outcome's)
//	 30   2 fingerprint length n
//	 32   n fingerprint
//	32+n  … result (Completed: the value; Failed: the encoded cause)
//
// The expiry is not in the value: it is the key's own (PEXPIREAT), read
// back with PEXPIRETIME. Microseconds keep every time below 2^53, the
// largest integer Lua's doubles hold exactly, until the year 2255; that is
// also why the token travels as 8 raw bytes and never as a Lua number.
const (
	formatV1  = 1
	headerLen = 32

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
// PEXPIRETIME (≤ 0: none known). It never panics: a value it does not know
// gives an error wrapping ErrUnknownFormat. The record's slices are fresh
// copies.
func decodeRecord(key, v string, expiresMs int64) (idem.Record, error) {
	if len(v) > 0 && v[0] != formatV1 {
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
	fpEnd := headerLen + int(binary.BigEndian.Uint16(h[30:32]))
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
	if lease := int64(binary.BigEndian.Uint64(h[14:22])); lease > 0 {
		r.LeaseUntil = time.UnixMicro(lease)
	}
	if fpEnd < len(v) {
		r.Result = []byte(v[fpEnd:])
	}
	if expiresMs > 0 {
		r.ExpiresAt = time.UnixMilli(expiresMs)
	}
	return r, nil
}

// appendToken appends t as the 8 bytes the scripts compare.
func appendToken(dst []byte, t idem.Token) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(t))
}

// micros converts d to whole microseconds, rounding up so that no positive
// duration becomes zero.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}
