package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
)

// The Lua scripts, one per transition. Each touches only KEYS[1], reads the
// time with TIME (the server's clock), and packs the value described in
// record.go with struct.pack. The '#!lua' line opts into Redis 7 script
// flags: a write script is refused when the server is out of memory, and
// the get script, flagged no-writes, may also run on a replica.

// header is the struct format of the value's fixed 32-byte header.
const header = `'>BBc8I4i8i8I2'`

// clock sets now to the server's time in microseconds. Numbers go to
// redis.call as Lua doubles, which Redis prints exactly below 2^53.
const clock = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
`

// claimFn is the claim of one key, a Lua function over the key, the new
// record's first 14 bytes (version, status, token, attempt 1) and its bytes
// from offset 22 on (retention, fingerprint length, fingerprint), both
// packed by the client, lease µs, retention µs, max attempts (0: no cap),
// the too-many-attempts cause and the time now (µs). Only the lease end is
// packed here: the client does what it can, so Redis, which runs one
// script at a time, does little. It returns {1, lease end µs} when it
// created the record (the client knows the rest), {code, value, expiry ms}
// with code 1 Acquired, 2 Busy, 3 Duplicate for a record that was there,
// {4} when the fingerprint differs and {0, value} for a value it does not
// know. The common case, a new key, is one SET NX … GET: it writes the new
// record and, when there is one already, answers the old one instead. A
// claim that finds its own token is this very claim resent by the client
// after a lost reply: it answers Acquired again.
const claimFn = `
local function claim(key, pre, post, lease, ret, cap, cause, now)
  local lu = now + lease
  local exp = math.ceil((lu + ret) / 1000)
  local v = redis.call('SET', key, pre .. struct.pack('>i8', lu) .. post, 'NX', 'PXAT', exp, 'GET')
  if not v then return {1, lu} end
  if #v < 32 or string.byte(v, 1) ~= 1 then return {0, v} end
  local _, st, cur, att, old, _, fl = struct.unpack(` + header + `, v)
  if st < 1 or st > 3 or #v < 32 + fl then return {0, v} end
  local fp = string.sub(post, 11)
  if string.sub(v, 33, 32 + fl) ~= fp then return {4} end
  if st ~= 1 then return {3, v, redis.call('PEXPIRETIME', key)} end
  local tok = string.sub(pre, 3, 10)
  if cur == tok then return {1, v, redis.call('PEXPIRETIME', key)} end
  if old > now then return {2, v, redis.call('PEXPIRETIME', key)} end
  local nv
  if cap > 0 and att >= cap then
    nv = struct.pack(` + header + `, 1, 3, string.rep('\0', 8), att, 0, ret, fl) .. fp .. cause
    exp = math.ceil((now + ret) / 1000)
    redis.call('SET', key, nv, 'PXAT', exp)
    return {3, nv, exp}
  end
  nv = struct.pack(` + header + `, 1, 1, tok, att + 1, lu, ret, fl) .. fp
  redis.call('SET', key, nv, 'PXAT', exp)
  return {1, nv, exp}
end
`

// claimScript claims KEYS[1] (see claimFn). ARGV: the record's head and
// tail, lease µs, retention µs, max attempts, the too-many-attempts cause.
var claimScript = newScript(`#!lua` + claimFn + clock + `
return claim(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], now)
`)

// claimBatchScript claims every key of KEYS in order, at one time now, and
// replies with the list of their claimFn replies. ARGV: the
// too-many-attempts cause, then for each key its record's head and tail,
// lease µs, retention µs and max attempts. It touches several keys, so it serves
// a client of one server only (standalone or Sentinel); on Cluster, where
// the keys live in different slots, ClaimBatch pipelines claimScript.
// Running n claims in one script spares Redis n script calls, most of what
// a claim costs it.
var claimBatchScript = newScript(`#!lua` + claimFn + clock + `
local out = {}
for i = 1, #KEYS do
  local a = 1 + (i - 1) * 5
  out[i] = claim(KEYS[i], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), ARGV[1], now)
end
return out
`)

// holder starts the scripts that need the current token (ARGV[1]) on an
// InProgress record: they reply 0 (lease lost) when it is not, -1 for a
// value they do not know. It reads the few bytes it checks rather than
// unpacking the whole header.
const holder = `#!lua
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if #v < 32 or string.byte(v, 1) ~= 1 then return -1 end
local st, fl = string.byte(v, 2), string.byte(v, 31) * 256 + string.byte(v, 32)
if st < 1 or st > 3 or #v < 32 + fl then return -1 end
if st ~= 1 or string.sub(v, 3, 10) ~= ARGV[1] then return 0 end
`

// outcomeScript (Complete and Fail): ARGV token, status byte, result,
// retention (8 bytes, µs), retention in ms. The record keeps its token,
// attempt and fingerprint, loses its lease, and expires retention from now
// (PX: the server's clock, no TIME needed).
var outcomeScript = newScript(holder + `
redis.call('SET', KEYS[1], '\1' .. ARGV[2] .. string.sub(v, 3, 14) .. '\0\0\0\0\0\0\0\0' .. ARGV[4] .. string.sub(v, 31, 32 + fl) .. ARGV[3], 'PX', ARGV[5])
return 1
`)

// releaseScript: ARGV token. It zeroes the token, so no token is current,
// and the lease end, so the next claim takes over; the expiry stays.
var releaseScript = newScript(holder + `
redis.call('SETRANGE', KEYS[1], 2, string.rep('\0', 8) .. string.sub(v, 11, 14) .. string.rep('\0', 8))
return 1
`)

// extendScript: ARGV token, lease µs. The lease ends lease from now, and
// the expiry moves out (never in) to the lease end plus the claim's
// retention.
var extendScript = newScript(holder + clock + `
local ret = struct.unpack('>i8', v, 23)
local lu = now + tonumber(ARGV[2])
redis.call('SETRANGE', KEYS[1], 14, struct.pack('>i8', lu))
redis.call('PEXPIREAT', KEYS[1], math.ceil((lu + ret) / 1000), 'GT')
return 1
`)

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
