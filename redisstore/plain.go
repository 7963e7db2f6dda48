package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/storage"
)

// A claim starts with plain commands, not a script: Redis spends far more
// on a script call (its Lua state, the KEYS and ARGV tables, each
// redis.call's fake client and reply conversion) than on a command, and
// the two commonest claims need no script. SET key nv NX PX px is the
// whole claim of a new key, the least any Redis idempotency check sends.
// For a key that has a record it writes nothing and answers nil; the
// client then reads the value with GETRANGE, cut after the longest record
// it would accept (the header, the claim's fingerprint and a result of
// MaxValueSize), so that a value of any length costs the client no more
// than that: SET … NX GET, which answered the value in the same step,
// read it whole, and eight claims of a 64 MiB value held 512 MiB. The
// value, when it is a finished record, is the whole record, expiry and
// all (see protocol.go): a replay costs the server two plain commands. A
// finished record with the claim's fingerprint is a Duplicate, another
// fingerprint is ErrKeyReused, a value this package did not write or a key
// of another type is ErrUnknownFormat: each of these is read off the
// value, as the claim script would, and no claim writes anything for
// them. A record that GETRANGE cut (its result is over the cap, or it is
// not ours), if its start does not settle the answer, and a record in
// progress go to the claim script, which answers a result over the cap
// with its length and without it. For a record in progress, whether its
// lease is live is for the server's clock to say (PTTL in the script; a
// PTTL pipelined beside SET would not be atomic with it, and could judge a
// record that another claim had replaced), and the script decides
// atomically whatever it finds by then (Busy, a takeover, the attempt cap,
// the claim's own token after a lost reply). GETRANGE reads the key after
// SET found it taken, not in the same step: the claim is answered as of
// the read, when the key was taken too, and a key gone by then goes to the
// script. A full Redis refuses SET, as it refuses the claim script, even
// for a key that exists: the claim then peeks (see peekFn), as before.

// plainClaim is the plain command of one claim, SET … NX PX … of its
// Redis key, and the GETRANGE that reads the key when SET found it taken.
type plainClaim struct {
	set *redis.Cmd
	get *redis.StringCmd // nil until read sets it
}

// newPlainClaim returns the plain command of the claim that creates the
// record nv (see newRecord), expiring px ms from now (claimExpiry; an int64
// in an interface, which a batch boxes once for all its entries), on the
// Redis key rkey. args, of plainClaimArgs elements, holds the command's
// arguments (a batch's commands share one array).
func newPlainClaim(ctx context.Context, args []any, rkey string, nv []byte, px any) plainClaim {
	args = append(args[:0], "set", rkey, nv, "nx", "px", px)
	set := redis.NewCmd(ctx, args...)
	set.SetFirstKeyPos(1)
	return plainClaim{set: set}
}

// plainClaimArgs is the length of a plain claim's command.
const plainClaimArgs = 6

// created reports whether the SET created the record. err is its error (a
// full Redis's OOM among them), for which nothing was claimed, or may have
// been (the network).
func (c plainClaim) created() (bool, error) {
	err := c.set.Err()
	if errors.Is(err, redis.Nil) {
		return false, nil // the key is taken
	}
	return err == nil, err
}

// read sets c's GETRANGE, which reads the value of the key SET found
// taken, cut after readLen(nv, maxResult) bytes, and returns c.
func (c plainClaim) read(ctx context.Context, nv []byte, maxResult int) plainClaim {
	c.get = redis.NewStringCmd(ctx, "getrange", c.set.Args()[1], 0, readLen(nv, maxResult)-1)
	return c
}

// readLen is how much of a taken key's value the claim whose new record
// is nv reads: one byte more than the longest record it would answer from
// the value alone, a finished record with nv's fingerprint and a result of
// maxResult, so that a longer value shows as cut.
func readLen(nv []byte, maxResult int) int { return len(nv) + maxResult + 1 }

// reply returns the claim script's reply that the read of the taken key
// stands for, for the claim whose new record is nv and whose longest
// result is maxResult: the reply of a key whose claim writes nothing, or,
// with needsScript set, nothing: the claim script must decide. err is the
// GETRANGE's error.
func (c plainClaim) reply(nv []byte, maxResult int) (reply any, needsScript bool, err error) {
	v, err := c.get.Result()
	switch {
	case isWrongType(err):
		return []any{int64(replyUnknown), int64(0)}, false, nil // the scripts' mark of another type
	case err != nil:
		return nil, false, err
	case v == "": // gone since SET found it, or an empty value: the script tells
		return nil, true, nil
	}
	reply = answerValue(v, nv, maxResult, len(v) >= readLen(nv, maxResult))
	if n, ok := reply.(int64); ok && n == replyNeedsWrite {
		return nil, true, nil
	}
	return reply, false, nil
}

// answerValue is the Go copy of what the claim script answers for a key
// that holds the value v (or, when cut is set, a value that starts with
// v), claimed with the new record nv and the longest result maxResult (a
// finished record's expiry is its own: the expiry in the reply is 0, which
// the decoder does not read for it): ErrKeyReused, a Duplicate, or an
// unknown value, in the script's reply, or replyNeedsWrite for an
// InProgress record, and for a cut value whose start does not settle the
// answer, which it leaves to the script. It checks what claimFn checks, in
// the same order, so that it answers as the script would
// (TestClaimAndPeekAgree, FuzzPlainClaim).
func answerValue(v string, nv []byte, maxResult int, cut bool) any {
	unknown := func() any { return []any{int64(replyUnknown), v[:min(len(v), headerLen)]} }
	if len(v) < headerLen || v[offVersion] != formatVersion {
		return unknown()
	}
	st := storage.Status(v[offStatus])
	if st < storage.StatusInProgress || st > storage.StatusFailed {
		return unknown()
	}
	fpEnd := headerLen + (int(v[offFpLen])<<8 | int(v[offFpLen+1]))
	if len(v) < fpEnd {
		if cut { // the rest of the value may hold the fingerprint
			return int64(replyNeedsWrite)
		}
		return unknown()
	}
	if v[headerLen:fpEnd] != string(nv[headerLen:]) {
		return []any{int64(replyKeyReused)}
	}
	if st == storage.StatusInProgress || cut { // the script answers a result over the cap with its length
		return int64(replyNeedsWrite)
	}
	if n := len(v) - fpEnd; n > maxResult {
		return []any{int64(replyDuplicate), v[:fpEnd], int64(0), int64(n)}
	}
	return []any{int64(replyDuplicate), v}
}

// isWrongType reports whether err is the server's WRONGTYPE reply: the
// key holds a value of another type (a hash, a list), which the command
// did not touch.
func isWrongType(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "WRONGTYPE")
}
