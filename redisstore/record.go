package redisstore

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/idemgo/idem/storage"
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
// PEXPIRETIME (≤ 0: none known, and then neither is the lease end), which
// an InProgress record needs; a finished one holds its expiry. It
// never panics: a value it does not know gives an error wrapping
// ErrUnknownFormat. The record's slices are fresh copies.
func decodeRecord(key, v string, expiresMs int64) (storage.Record, error) {
	if len(v) > 0 && v[offVersion] != formatVersion {
		return storage.Record{}, fmt.Errorf("%w: version %d", ErrUnknownFormat, v[offVersion])
	}
	if len(v) < headerLen {
		return storage.Record{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrUnknownFormat, len(v), headerLen)
	}
	var h [headerLen]byte
	copy(h[:], v)
	status := storage.Status(h[offStatus])
	if status != storage.StatusInProgress && !status.Done() {
		return storage.Record{}, fmt.Errorf("%w: status %d", ErrUnknownFormat, h[offStatus])
	}
	field := binary.BigEndian.Uint64(h[offRetention:offFpLen]) // the retention, or a finished record's expiry
	switch {
	case status.Done() && (field == 0 || field >= maxExpiry):
		return storage.Record{}, fmt.Errorf("%w: expiry %d ms", ErrUnknownFormat, field)
	case !status.Done() && (field == 0 || field > uint64(maxDuration/time.Millisecond)):
		return storage.Record{}, fmt.Errorf("%w: retention %d ms", ErrUnknownFormat, field)
	}
	fpEnd := headerLen + int(binary.BigEndian.Uint16(h[offFpLen:headerLen]))
	if fpEnd > len(v) {
		return storage.Record{}, fmt.Errorf("%w: the fingerprint runs past the value's end", ErrUnknownFormat)
	}
	r := storage.Record{
		Key:         key,
		Status:      status,
		Token:       storage.Token(binary.BigEndian.Uint64(h[offToken:offAttempt])),
		Attempt:     int(binary.BigEndian.Uint32(h[offAttempt:offRetention])),
		Fingerprint: []byte(v[headerLen:fpEnd]),
	}
	if fpEnd < len(v) {
		r.Result = []byte(v[fpEnd:])
	}
	if status.Done() {
		r.ExpiresAt = time.UnixMilli(int64(field))
	} else if expiresMs > 0 {
		r.ExpiresAt = time.UnixMilli(expiresMs)
		if r.Token != 0 {
			r.LeaseUntil = time.UnixMilli(expiresMs - int64(field))
		}
	}
	return r, nil
}

// appendToken appends t as the 8 bytes the scripts compare.
func appendToken(dst []byte, t storage.Token) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(t))
}

// holderPrefix returns the first holderPrefixLen bytes of the InProgress
// record whose current token is t, which the holder scripts compare.
func holderPrefix(t storage.Token) []byte { return recordPrefix(storage.StatusInProgress, t) }

// recordPrefix returns the first holderPrefixLen bytes of a record with
// status and token t: its version, status and token.
func recordPrefix(status storage.Status, t storage.Token) []byte {
	return appendToken(append(make([]byte, 0, holderPrefixLen), formatVersion, byte(status)), t)
}

// millis converts d to whole milliseconds, rounding up so that no
// positive duration becomes zero.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// completedRecord returns the Completed record that replaces v, an
// InProgress record of this format: v's token, attempt and fingerprint,
// expiry (8 bytes, see finishedExpiry) where v has its retention, and
// result. It is the record outcomeScript builds from v on the server.
func completedRecord(v, expiry, result []byte) []byte {
	r := make([]byte, 0, len(v)+len(result))
	r = append(r, formatVersion, byte(storage.StatusCompleted))
	r = append(r, v[offToken:offRetention]...)
	r = append(r, expiry...)
	r = append(r, v[offFpLen:]...)
	return append(r, result...)
}
