package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
)

// The Lua scripts, one per transition. Each touches only its keys' records
// and reads the value's fields by the names protocol.go defines. The lease
// end is the key's expiry less the retention held in the value, so the
// server's clock sets it (PX, PEXPIRE) and reads it (PTTL). A claim runs
// its script only for a key in progress: a new key, a duplicate, a reused
// key and an unknown value are answered by plain commands (plain.go), and
// the claim script's first line is SET NX PX GET, for the key that was gone
// by then (Lua's copy of the value stays on the server). The client packs every value it can; Redis runs one
// script at a time, so what a script does not do, no other caller waits
// for. The '#!lua' line opts into Redis 7 script flags: a write script is
// refused when the server is out of memory, and the get script, flagged
// no-writes, may also run on a replica. A key of another type (a hash, a
// list) is read with pcall and answered as a value this package did not
// write: a call that raised would stop a batch script halfway, after it
// claimed or completed the keys before it.

// knownFn is a Lua function that returns the fingerprint length of a value
// this package wrote, and nil for any other value.
const knownFn = `
local function known(v)
  if #v < HEADER_LEN or string.byte(v, VERSION) ~= FORMAT then return nil end
  local st, fl = string.byte(v, STATUS), struct.unpack('>I2', v, FP_LEN)
  if st < IN_PROGRESS or st > FAILED or #v < HEADER_LEN + fl then return nil end
  return fl
end
`

// answerFn is a Lua function that returns the record v of key, whose
// fingerprint ends at fpEnd, and its expiry ms; a result longer than
// maxResult is left out of the value, and its length returned third, so
// that no caller is sent a value over its store's MaxValueSize.
const answerFn = `
local function answer(key, v, fpEnd, maxResult)
  local n = #v - fpEnd
  if n > tonumber(maxResult) then return string.sub(v, 1, fpEnd), redis.call('PEXPIRETIME', key), n end
  return v, redis.call('PEXPIRETIME', key)
end
`

// claimFn is the claim of one key, a Lua function over the key, the new
// record nv (InProgress, its token, attempt 1, the retention and the
// fingerprint; packed by the client), the key's expiry from now in ms
// (lease plus retention), the max attempts (0: no cap) and the longest
// result it may answer (see answerFn). It answers as protocol.go says. The common case, a new key, is the first line: it
// writes the new record and, when there is one already, answers the old
// one instead. A claim that finds its own token is this very claim resent
// by the client after a lost reply: it answers Acquired again. The lease of
// an InProgress record is live while the key has more than its retention
// to live. A claim over the cap stores idem's too-many-attempts cause, a
// finished record that holds its expiry (see protocol.go): the server's
// TIME plus the retention, the key's PXAT (a rare write, which the client
// has no clock reading for).
// It checks the value as known does and answers as answer does, inline:
// Redis makes a script's local functions anew at each call, and a replay
// is this function's common case after a new key, so one closure instead
// of three is less for the server to build on the paths most calls take.
// TestClaimAndPeekAgree holds the two copies to one behaviour.
const claimFn = `
local function claim(key, nv, px, cap, maxResult)
  local v = redis.pcall('SET', key, nv, 'NX', 'PX', px, 'GET')
  if not v then return CREATED end
  if type(v) == 'table' then return {UNKNOWN, 0} end
  if #v < HEADER_LEN or string.byte(v, VERSION) ~= FORMAT then return {UNKNOWN, string.sub(v, 1, UNKNOWN_HEAD)} end
  local st = string.byte(v, STATUS)
  local fpEnd = HEADER_LEN + string.byte(v, FP_LEN) * 256 + string.byte(v, FP_LEN + 1)
  if st < IN_PROGRESS or st > FAILED or #v < fpEnd then return {UNKNOWN, string.sub(v, 1, UNKNOWN_HEAD)} end
  if string.sub(v, FINGERPRINT, fpEnd) ~= string.sub(nv, FINGERPRINT) then return {KEY_REUSED} end
  local code = DUPLICATE
  if st == IN_PROGRESS then
    if string.sub(v, TOKEN, TOKEN_END) == string.sub(nv, TOKEN, TOKEN_END) then
      code = ACQUIRED
    elseif redis.call('PTTL', key) <= struct.unpack('>i8', v, RETENTION) then
      local att = struct.unpack('>I4', v, ATTEMPT)
      cap = tonumber(cap)
      if cap > 0 and att >= cap then
        local t = redis.call('TIME')
        local at = t[1] * 1000 + math.floor(t[2] / 1000) + struct.unpack('>i8', nv, RETENTION)
        v = string.char(FORMAT, FAILED) .. NO_TOKEN .. string.sub(v, ATTEMPT, ATTEMPT_END) ..
          struct.pack('>i8', at) .. string.sub(v, FP_LEN, fpEnd) .. TOO_MANY_ATTEMPTS
        redis.call('SET', key, v, 'PXAT', at)
      else
        v = string.sub(nv, VERSION, TOKEN_END) .. struct.pack('>I4', att + 1) .. string.sub(nv, RETENTION)
        redis.call('SET', key, v, 'PX', px)
        code = ACQUIRED
      end
    else
      code = BUSY
    end
  end
  local n = #v - fpEnd
  if n > tonumber(maxResult) then return {code, string.sub(v, 1, fpEnd), redis.call('PEXPIRETIME', key), n} end
  return {code, v, redis.call('PEXPIRETIME', key)}
end
`

// claimScript claims KEYS[1] (see claimFn). ARGV: the new record, the
// expiry ms, the max attempts, the longest result.
var claimScript = newScript("", claimFn+`
return claim(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
`)

// claimBatchScript claims every key of KEYS in order and replies with the
// list of their claimFn replies. ARGV: the longest result, then for each
// key its new record, expiry ms and max attempts. It touches several keys, so it serves a
// client of one server only (standalone or Sentinel); on Cluster, where
// the keys live in different slots, ClaimBatch pipelines claimScript.
// Running n claims in one script spares Redis n script calls, most of what
// a claim costs it.
var claimBatchScript = newScript("", claimFn+`
local out = {}
for i = 1, #KEYS do
  local a = i * 3 - 1
  out[i] = claim(KEYS[i], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[1])
end
return out
`)

// peekFn is the read-only half of claimFn, over the same arguments (px
// and cap unused): it answers as claimFn does a key whose claim writes
// nothing, a Duplicate, a Busy, a reused key or an unknown value, and
// NEEDS_WRITE for every other (no record, a lease to take over, the
// claim's own token, a cap to apply). A full Redis refuses the claim
// script, a write script, before it runs; the store then peeks, so that
// a duplicate is still answered.
const peekFn = knownFn + answerFn + `
local function peek(key, nv, maxResult)
  local v = redis.pcall('GET', key)
  if not v then return NEEDS_WRITE end
  if type(v) == 'table' then return {UNKNOWN, 0} end
  local fl = known(v)
  if not fl then return {UNKNOWN, string.sub(v, 1, UNKNOWN_HEAD)} end
  local fpEnd = HEADER_LEN + fl
  if string.sub(v, FINGERPRINT, fpEnd) ~= string.sub(nv, FINGERPRINT) then return {KEY_REUSED} end
  if string.byte(v, STATUS) ~= IN_PROGRESS then return {DUPLICATE, answer(key, v, fpEnd, maxResult)} end
  if string.sub(v, TOKEN, TOKEN_END) ~= string.sub(nv, TOKEN, TOKEN_END) and
    redis.call('PTTL', key) > struct.unpack('>i8', v, RETENTION) then
    return {BUSY, answer(key, v, fpEnd, maxResult)}
  end
  return NEEDS_WRITE
end
`

// peekScript peeks at KEYS[1] (see peekFn), with the arguments of
// claimScript. It is flagged no-writes, which a full Redis runs, and
// sent with EVALSHA_RO.
var peekScript = newReadOnlyScript(peekFn + `
return peek(KEYS[1], ARGV[1], ARGV[4])
`)

// peekBatchScript peeks at every key of KEYS in order, with the
// arguments of claimBatchScript, and replies with the list of their
// peekFn replies.
var peekBatchScript = newReadOnlyScript(peekFn + `
local out = {}
for i = 1, #KEYS do
  out[i] = peek(KEYS[i], ARGV[i * 3 - 1], ARGV[1])
end
return out
`)

// holderScript returns the script of a transition that needs the current
// token on an InProgress record: ARGV[1] is the first holderPrefixLen
// bytes of such a record (version, status, token). When they match, the
// script runs body on the record v and answers DONE; else LOST, or UNKNOWN
// for a value this package did not write.
func holderScript(body string) *script {
	return newScript("", knownFn+`
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then return UNKNOWN end
if v and string.sub(v, VERSION, TOKEN_END) == ARGV[1] then
`+body+`
  return DONE
end
if v and not known(v) then return UNKNOWN end
return LOST
`)
}

// outcomeScript (Complete and Fail): ARGV the holder's prefix, the version
// and new status, the result, the retention ms, the expiry the record
// holds (8 bytes, packed by the client: see protocol.go). The record keeps
// its token, attempt and fingerprint, gains the result, and expires
// retention from now; no longer InProgress, it has no lease.
var outcomeScript = holderScript(`
  redis.call('SET', KEYS[1], ARGV[2] .. string.sub(v, TOKEN, ATTEMPT_END) .. ARGV[5] .. string.sub(v, FP_LEN) .. ARGV[3],
    'PX', ARGV[4])`)

// completeBatchScript completes every key of KEYS in order, as
// outcomeScript does with the status Completed. ARGV: the version and new
// status, the retention ms and the expiry the records hold, the same for
// every key of the call (batchCmds starts a new call where the retention
// changes), then two for each key, in one of two forms. When the client
// holds the record its claim created (see held), they are that whole
// record and the whole Completed record to write: the script compares the
// one it reads with the first and writes the second as it is. Otherwise
// they are the holder's prefix and the result, and the script builds the
// new record from the one it reads. The first form spares the server the
// building (held says how much); the second keeps every other completion
// as it was. A record is never as short as a prefix, so a prefix never
// passes for a whole record. It writes with PSETEX, which spares the
// server SET's option parsing.
//
// It reads every record with one MGET, which costs the server far less
// than a GET per key through redis.call, so the keys of one call must be
// distinct (batchCmds makes them so): a key completed earlier in the call
// is not read again. A key MGET finds no string under is read once more
// with GET, to tell a missing record (LOST) from a key of another type
// (UNKNOWN). It replies with the entries that were not completed only,
// {i, LOST or UNKNOWN, …} (see exceptionReplies). Like claimBatchScript
// it serves a client of one server only; on Cluster, CompleteBatch
// pipelines outcomeScript. Completing n keys in one script spares Redis n
// script calls, most of what a complete costs it.
var completeBatchScript = newScript("", knownFn+`
local vs = redis.call('MGET', unpack(KEYS))
local out = {}
for i = 1, #KEYS do
  local a, v = i * 2 + 2, vs[i]
  if v == ARGV[a] and #v > TOKEN_END then
    redis.call('PSETEX', KEYS[i], ARGV[2], ARGV[a + 1])
  elseif v and string.sub(v, VERSION, TOKEN_END) == ARGV[a] then
    redis.call('PSETEX', KEYS[i], ARGV[2], ARGV[1] .. string.sub(v, TOKEN, ATTEMPT_END) .. ARGV[3] .. string.sub(v, FP_LEN) .. ARGV[a + 1])
  else
    if not v then v = redis.pcall('GET', KEYS[i]) end
    out[#out + 1] = i
    if type(v) == 'table' or (v and not known(v)) then
      out[#out + 1] = UNKNOWN
    else
      out[#out + 1] = LOST
    end
  end
end
return out
`)

// releaseScript: ARGV the holder's prefix. It zeroes the token, so no
// token is current, and ends the lease now: the key expires the claim's
// retention from now, so the next claim takes over at once.
var releaseScript = holderScript(`
  redis.call('SET', KEYS[1], string.sub(v, VERSION, STATUS) .. NO_TOKEN .. string.sub(v, ATTEMPT), 'PX',
    (struct.unpack('>i8', v, RETENTION)))`)

// extendScript: ARGV the holder's prefix, the lease ms. The lease ends
// lease from now: the key expires the claim's retention after that.
var extendScript = holderScript(`
  redis.call('PEXPIRE', KEYS[1], ARGV[2] + struct.unpack('>i8', v, RETENTION))`)

// deleteIfScript (DeleteIf): ARGV the prefix of the record read (its
// version, status and token). It deletes the key only when its value
// starts so, and answers DONE; else ABSENT for no record, UNKNOWN for a
// value this package did not write, LOST for a record in another status or
// with another token.
var deleteIfScript = newScript("", knownFn+`
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then return UNKNOWN end
if not v then return ABSENT end
if string.sub(v, VERSION, TOKEN_END) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return DONE
end
if not known(v) then return UNKNOWN end
return LOST
`)

// getScript replies {value, expiry ms}, {value without its result,
// expiry ms, result length} for a result longer than ARGV[1] (see
// answerFn), the start of a value this package did not write, or {} when
// there is no record.
var getScript = newScript("flags=no-writes", knownFn+answerFn+`
local v = redis.pcall('GET', KEYS[1])
if not v then return {} end
if type(v) == 'table' then return {0} end
local fl = known(v)
if not fl then return {string.sub(v, 1, UNKNOWN_HEAD)} end
return {answer(KEYS[1], v, HEADER_LEN + fl, ARGV[1])}
`)

// script is a Lua script and its SHA-1, the name EVALSHA runs it by.
type script struct {
	src string
	sha string
	ro  bool // sent with EVALSHA_RO and EVAL_RO

	body string // as written, with the names of luaConstants
}

// newReadOnlyScript returns the script of body flagged no-writes, which
// Redis runs when it is out of memory, to be sent with EVALSHA_RO, which
// the server refuses to run anything but a read with.
func newReadOnlyScript(body string) *script {
	sc := newScript("flags=no-writes", body)
	sc.ro = true
	return sc
}

// newScript returns the script of body, under the '#!lua' line with
// flags, each name of luaConstants in body replaced by its value. Literals
// rather than locals declared at the top: Redis runs a script's body
// anew at each call, where every local that a function of the script
// reads would become an upvalue of that function's closure, allocated
// and closed at each call; a literal is a constant of the compiled
// function, and costs nothing per call.
func newScript(flags, body string) *script {
	shebang := "#!lua"
	if flags != "" {
		shebang += " " + flags
	}
	src := shebang + "\n" + renderConstants(body)
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:]), body: body}
}
