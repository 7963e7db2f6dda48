package redisstore

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/idemgo/idem/storage"
)

// This file is the protocol between the client and the Lua scripts, in one
// place: the layout of a record's stored value and the scripts' reply
// codes. Go reads the constants below; the scripts read the same values as
// Lua locals that luaPrelude renders from luaConstants, so the two sides
// cannot drift apart.

// The stored value of a record, big-endian, packed by the client and read
// here and by the Lua scripts:
//
//	field        offset  length
//	version         0       1   format version (formatVersion)
//	status          1       1   storage.Status
//	token           2       8   uint64; zero once released or failed by the attempt cap
//	attempt        10       4   uint32
//	retention      14       8   InProgress: the claim's retention in milliseconds;
//	                            Completed, Failed: the key's expiry, Unix milliseconds
//	fpLen          22       2   fingerprint length n
//	fingerprint    24       n
//	result        24+n      …   Completed: the value; Failed: the encoded cause
//
// An InProgress record's expiry is not in the value: it is the key's own,
// set with PX or PEXPIRE on the Redis clock and read back with
// PEXPIRETIME. Neither is the lease end: while a record is InProgress its
// key expires the claim's retention after its lease ends, so the lease end
// is the expiry less the retention, and the lease is live while the key
// has more than the retention to live (PTTL). A finished record no longer
// needs the claim's retention, and holds its expiry in its place, so that
// the value a claim's GETRANGE reads is the whole record, expiry and
// all, with no PEXPIRETIME. Complete, Fail and CompleteBatch reckon it
// on the client's clock, as a new key's Claim reckons its record's times:
// when the outcome was sent, plus the retention, while the key itself
// expires the retention after the script ran, on the server's clock (PX).
// It is what the record reports as ExpiresAt, and a Guard's cache keeps the
// outcome no longer; no lease or expiry is decided by it. The attempt
// cap's Failed record, written by the claim script, holds the server's
// TIME plus the retention, its key's PXAT. An expiry changed by hand
// later (EXPIRE) is not seen in a finished record. Times are whole
// milliseconds, as Redis keeps them.
// Format 1, which held the lease end in the value, and format 2, whose
// finished records kept the claim's retention, were never released; their
// values are refused like any other unknown one.
const (
	offVersion   = 0
	offStatus    = offVersion + 1
	offToken     = offStatus + 1
	offAttempt   = offToken + 8
	offRetention = offAttempt + 4
	offFpLen     = offRetention + 8
	headerLen    = offFpLen + 2 // the fingerprint starts here

	// holderPrefixLen is how much of an InProgress record the holder
	// scripts compare with the caller's: version, status and token.
	holderPrefixLen = offAttempt

	formatVersion = 3

	// maxExpiry bounds a finished record's expiry, Unix milliseconds that
	// pass through Lua doubles, exact below 2^53.
	maxExpiry = 1 << 53

	// maxFingerprint is the longest fingerprint the 16-bit length holds.
	maxFingerprint = 1<<16 - 1
)

// The scripts' replies.
//
// The claim script answers, for each key, replyCreated as a bare integer
// when it created the record from the claim's own arguments (the client
// knows the record then), or a list {code, value, expiry ms} for a record
// that was there: code replyAcquired (a takeover, or this very claim resent
// after a lost reply), replyBusy or replyDuplicate, with the record after
// the claim. A result longer than the client's MaxValueSize is left out of
// the value, and its length follows: {code, value, expiry ms, length}. It
// answers {replyKeyReused} when the fingerprint differs and {replyUnknown,
// value} for a value this package did not write, cut after the header
// (UNKNOWN_HEAD): the decoder finds in it why the value is not a record
// (its version, status or fingerprint length; a fingerprint that runs past
// the end of the value runs past the end of its header too), and another
// program's value costs a reply of a few bytes, whatever its length.
//
// The peek scripts, which a full Redis still runs, answer a key as the
// claim script does when its claim writes nothing (a Duplicate, a Busy,
// a reused key, an unknown value), and replyNeedsWrite as a bare integer
// for any other.
//
// The holder scripts (Complete, Fail, Release, Extend) answer replyDone,
// replyLost when the record is not InProgress with the caller's token, or
// replyUnknown. The conditional delete script answers the same, and
// replyAbsent when the key has no record.
const (
	replyUnknown   = -1
	replyLost      = 0
	replyDone      = 1
	replyCreated   = 1
	replyAcquired  = 1
	replyBusy      = 2
	replyDuplicate = 3
	replyKeyReused = 4
	replyAbsent    = 2

	// replyNeedsWrite: the peek scripts' answer for a key whose claim
	// needs a write.
	replyNeedsWrite = 0
)

// luaConst is a constant the scripts read, under its Lua name.
type luaConst struct {
	name  string
	value string // a Lua literal
}

// luaConstants are every name the scripts read besides KEYS and ARGV. Lua
// strings count from 1: a field's first byte is its offset plus one, its
// last its offset plus its length.
var luaConstants = []luaConst{
	luaInt("FORMAT", formatVersion),
	luaInt("IN_PROGRESS", int(storage.StatusInProgress)),
	luaInt("FAILED", int(storage.StatusFailed)),

	luaInt("VERSION", offVersion+1),
	luaInt("STATUS", offStatus+1),
	luaInt("TOKEN", offToken+1),
	luaInt("TOKEN_END", offAttempt),
	luaInt("ATTEMPT", offAttempt+1),
	luaInt("ATTEMPT_END", offRetention),
	luaInt("RETENTION", offRetention+1),
	luaInt("FP_LEN", offFpLen+1),
	luaInt("HEADER_LEN", headerLen),
	luaInt("FINGERPRINT", headerLen+1),
	luaInt("UNKNOWN_HEAD", headerLen),

	luaInt("UNKNOWN", replyUnknown),
	luaInt("LOST", replyLost),
	luaInt("DONE", replyDone),
	luaInt("CREATED", replyCreated),
	luaInt("ACQUIRED", replyAcquired),
	luaInt("BUSY", replyBusy),
	luaInt("DUPLICATE", replyDuplicate),
	luaInt("KEY_REUSED", replyKeyReused),
	luaInt("NEEDS_WRITE", replyNeedsWrite),
	luaInt("ABSENT", replyAbsent),

	{"NO_TOKEN", luaString(make([]byte, offAttempt-offToken))},
	{"TOO_MANY_ATTEMPTS", luaString(storage.TooManyAttemptsCause())},
}

func luaInt(name string, v int) luaConst { return luaConst{name, strconv.Itoa(v)} }

// luaName matches a name a script may read (upper case, digits,
// underscores), or a string literal between single quotes, which
// renderConstants leaves as it is ('GET', '>i8').
var luaName = regexp.MustCompile(`'[^']*'|\b[A-Z][A-Z0-9_]*\b`)

// luaValues maps the name of each of luaConstants to its value.
var luaValues = func() map[string]string {
	m := make(map[string]string, len(luaConstants))
	for _, c := range luaConstants {
		m[c.name] = c.value
	}
	return m
}()

// renderConstants returns body with each name of luaConstants replaced by
// its value (KEYS, ARGV, any other name and string literals are left as
// they are). A
// negative value is put between parentheses, so that "x - UNKNOWN" stays
// a subtraction of -1.
func renderConstants(body string) string {
	return luaName.ReplaceAllStringFunc(body, func(name string) string {
		v, ok := luaValues[name]
		if !ok {
			return name
		}
		if strings.HasPrefix(v, "-") {
			return "(" + v + ")"
		}
		return v
	})
}

// luaPrelude declares luaConstants as locals of a script, in one
// statement: the tests read the fields of a record with the scripts'
// names this way.
func luaPrelude() string {
	names := make([]string, len(luaConstants))
	values := make([]string, len(luaConstants))
	for i, c := range luaConstants {
		names[i], values[i] = c.name, c.value
	}
	return "local " + strings.Join(names, ", ") + " = " + strings.Join(values, ", ") + "\n"
}

// luaString returns b as a Lua string literal, every byte a decimal
// escape.
func luaString(b []byte) string {
	var sb strings.Builder
	sb.WriteByte('\'')
	for _, c := range b {
		sb.WriteString("\\" + strconv.Itoa(int(c)))
	}
	sb.WriteByte('\'')
	return sb.String()
}
