package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/idemgo/idem"
)

// The Lua scripts, one per transition. Each touches only KEYS[1] and keeps
// the record in the value described in record.go. No script reads TIME:
// the lease end is the key's expiry less the retention held in the value,
// so the server's clock sets it (PX, PEXPIRE) and reads it (PTTL), and a
// claim of a new key is one SET NX PX GET with nothing computed in Lua.
// The client packs every value it can; Redis runs one script at a time, so
// what a script does not do, no other caller waits for. The '#!lua' line
// opts into Redis 7 script flags: a write script is refused when the
// server is out of memory, and the get script, flagged no-writes, may also
// run on a replica.

// claimFn is the claim of one key, a Lua function over the key, the new
// record nv (version, InProgress, token, attempt 1, retention ms,
// fingerprint length, fingerprint; packed by the client), the key's expiry
// from now in ms (lease plus retention) and the max attempts (0: no cap).
// A claim over the cap stores idem's too-many-attempts cause, a constant
// of the script. It returns 1 when it created the record (the client knows
// it), {code, value, expiry ms} with code 1 Acquired, 2 Busy, 3 Duplicate
// for a record that was there, {4} when the fingerprint differs and {0,
// value} for a value it does not know. The common case, a new key, is the
// first line: it writes the new record and, when there is one already,
// answers the old one instead. A claim that finds its own token is this
// very claim resent by the client after a lost reply: it answers Acquired
// again. The lease of an InProgress record is live while the key has more
// than its retention to live.
var claimFn = `
local function claim(key, nv, px, cap)
  local v = redis.call('SET', key, nv, 'NX', 'PX', px, 'GET')
  if not v then return 1 end
  if #v < 24 or string.byte(v, 1) ~= 2 then return {0, v} end
  local st, fl = string.byte(v, 2), string.byte(v, 23) * 256 + string.byte(v, 24)
  if st < 1 or st > 3 or #v < 24 + fl then return {0, v} end
  if string.sub(v, 25, 24 + fl) ~= string.sub(nv, 25) then return {4} end
  if st == 1 and string.sub(v, 3, 10) ~= string.sub(nv, 3, 10) then
    if redis.call('PTTL', key) <= struct.unpack('>i8', v, 15) then
      local att = struct.unpack('>I4', v, 11)
      cap = tonumber(cap)
      if cap > 0 and att >= cap then
        nv = string.sub(v, 1, 1) .. '\3\0\0\0\0\0\0\0\0' .. string.sub(v, 11, 14) .. string.sub(nv, 15, 22) .. string.sub(v, 23, 24 + fl) .. ` + luaString(idem.TooManyAttemptsCause()) + `
        redis.call('SET', key, nv, 'PX', (struct.unpack('>i8', nv, 15)))
        return {3, nv, redis.call('PEXPIRETIME', key)}
      end
      nv = string.sub(nv, 1, 10) .. struct.pack('>I4', att + 1) .. string.sub(nv, 15)
      redis.call('SET', key, nv, 'PX', px)
      return {1, nv, redis.call('PEXPIRETIME', key)}
    end
    return {2, v, redis.call('PEXPIRETIME', key)}
  end
  return {st == 1 and 1 or 3, v, redis.call('PEXPIRETIME', key)}
end
`

// claimScript claims KEYS[1] (see claimFn). ARGV: the new record, the
// expiry ms, the max attempts.
var claimScript = newScript(`#!lua` + claimFn + `
return claim(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
`)

// claimBatchScript claims every key of KEYS in order and replies with the
// list of their claimFn replies. ARGV: for each key its new record,
// expiry ms and max attempts. It touches several keys, so it serves a
// client of one server only (standalone or Sentinel); on Cluster, where
// the keys live in different slots, ClaimBatch pipelines claimScript.
// Running n claims in one script spares Redis n script calls, most of what
// a claim costs it.
var claimBatchScript = newScript(`#!lua` + claimFn + `
local out = {}
for i = 1, #KEYS do
  local a = i * 3 - 2
  out[i] = claim(KEYS[i], ARGV[a], ARGV[a + 1], ARGV[a + 2])
end
return out
`)

// holder starts the scripts that need the current token on an InProgress
// record: ARGV[1] is the 10 bytes an InProgress record with that token
// starts with (version, status, token). The script goes on when they match
// and ends with miss when they do not.
const holder = `#!lua
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 10) == ARGV[1] then
`

// miss ends the holder scripts: 0 (lease lost) when the record is not
// InProgress with the token, -1 for a value they do not know.
const miss = `
  return 1
end
if not v then return 0 end
if #v < 24 or string.byte(v, 1) ~= 2 then return -1 end
local st, fl = string.byte(v, 2), string.byte(v, 23) * 256 + string.byte(v, 24)
if st < 1 or st > 3 or #v < 24 + fl then return -1 end
return 0
`

// outcomeScript (Complete and Fail): ARGV the holder's prefix, the version
// and new status, the result, the retention ms. The record keeps its
// token, attempt and fingerprint, gains the result, and expires retention
// from now; no longer InProgress, it has no lease.
var outcomeScript = newScript(holder + `
  redis.call('SET', KEYS[1], ARGV[2] .. string.sub(v, 3) .. ARGV[3], 'PX', ARGV[4])` + miss)

// releaseScript: ARGV the holder's prefix. It zeroes the token, so no
// token is current, and ends the lease now: the key expires the claim's
// retention from now, so the next claim takes over at once.
var releaseScript = newScript(holder + `
  redis.call('SET', KEYS[1], string.sub(v, 1, 2) .. '\0\0\0\0\0\0\0\0' .. string.sub(v, 11), 'PX', (struct.unpack('>i8', v, 15)))` + miss)

// extendScript: ARGV the holder's prefix, the lease ms. The lease ends
// lease from now: the key expires the claim's retention after that.
var extendScript = newScript(holder + `
  redis.call('PEXPIRE', KEYS[1], ARGV[2] + struct.unpack('>i8', v, 15))` + miss)

// getScript replies {value, expiry ms}, or {} when there is no record.
var getScript = newScript(`#!lua flags=no-writes
local v = redis.call('GET', KEYS[1])
if not v then return {} end
return {v, redis.call('PEXPIRETIME', KEYS[1])}
`)

// script is a Lua script and its SHA-1, the name EVALSHA runs it by.
type script struct {
	src string
	sha string
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
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
