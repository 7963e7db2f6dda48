package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/storage"
)

// A claim starts with a plain command, not a script: Redis spends far
// more on a script call (its Lua state, the KEYS and ARGV tables, each
// redis.call's fake client and reply conversion) than on a command, and
// the two commonest claims need no script. SET key nv NX PX px GET is the
// whole claim of a new key, the least any Redis idempotency check sends;
// for a key that has a record it writes nothing and answers the value,
// which is the whole record when it is finished, expiry and all (see
// protocol.go): a replay costs the server about what a GET does. A
// finished record with the claim's fingerprint is a Duplicate, another
// fingerprint is ErrKeyReused, a value this package did not write or a key
// of another type is ErrUnknownFormat: each of these is read off the
// value, as the claim script would, and no claim writes anything for
// them. An InProgress record goes to the claim script, in a second round
// trip: whether its lease is live is for the server's clock to say (PTTL
// in the script; a PTTL pipelined beside SET would not be atomic with it,
// and could judge a record that another claim had replaced), and the
// script decides atomically whatever it finds by then (Busy, a takeover,
// the attempt cap, the claim's own token after a lost reply). A full
// Redis refuses SET, as it refuses the claim script, even for a key that
// exists: the claim then peeks (see peekFn), as before.

// plainClaim is the plain command of one claim: SET … NX PX … GET of its
// Redis key.
type plainClaim struct {
	set *redis.Cmd
}

// newPlainClaim returns the plain command of the claim that creates the
// record nv (see newRecord), expiring px ms from now (claimExpiry; an int64
// in an interface, which a batch boxes once for all its entries), on the
// Redis key rkey. args, of plainClaimArgs elements, holds the command's
// arguments (a batch's commands share one array).
func newPlainClaim(ctx context.Context, args []any, rkey string, nv []byte, px any) plainClaim {
	args = append(args[:0], "set", rkey, nv, "nx", "px", px, "get")
	set := redis.NewCmd(ctx, args...)
	set.SetFirstKeyPos(1)
	return plainClaim{set: set}
}

// plainClaimArgs is the length of a plain claim's command.
const plainClaimArgs = 7

// reply returns the claim script's reply that the plain command's answer
// stands for, for the claim whose new record is nv and whose longest result
// is maxResult: replyCreated, the reply of a key whose claim writes
// nothing, or, with needsScript set, nothing: the claim script must
// decide. err is the SET's error (a full Redis's OOM among them), for
// which nothing was claimed, or may have been (the network).
func (c plainClaim) reply(nv []byte, maxResult int) (reply any, needsScript bool, err error) {
	v, err := c.set.Text()
	switch {
	case errors.Is(err, redis.Nil):
		return int64(replyCreated), false, nil
	case isWrongType(err):
		return []any{int64(replyUnknown), int64(0)}, false, nil // the scripts' mark of another type
	case err != nil:
		return nil, false, err
	}
	reply = answerValue(v, nv, maxResult)
	if n, ok := reply.(int64); ok && n == replyNeedsWrite {
		return nil, true, nil
	}
	return reply, false, nil
}

// answerValue is the Go copy of what the claim script answers for a key
// that holds the value v, claimed with the new record nv and the longest
// result maxResult (a finished record's expiry is its own: the expiry in
// the reply is 0, which the decoder does not read for it): ErrKeyReused, a
// Duplicate, or an unknown value, in the script's reply, or
// replyNeedsWrite for an InProgress record, which it leaves to the
// script. It checks what claimFn checks, in the same order, so that it
// answers as the script would (TestClaimAndPeekAgree,
// FuzzPlainClaim).
func answerValue(v string, nv []byte, maxResult int) any {
	unknown := func() any { return []any{int64(replyUnknown), v[:min(len(v), headerLen+maxFingerprint)]} }
	if len(v) < headerLen || v[offVersion] != formatVersion {
		return unknown()
	}
	st := storage.Status(v[offStatus])
	fpEnd := headerLen + (int(v[offFpLen])<<8 | int(v[offFpLen+1]))
	if st < storage.StatusInProgress || st > storage.StatusFailed || len(v) < fpEnd {
		return unknown()
	}
	if v[headerLen:fpEnd] != string(nv[headerLen:]) {
		return []any{int64(replyKeyReused)}
	}
	if st == storage.StatusInProgress {
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
