package redisstoretest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// fencedChunk is the most keys one run of fencedScript writes; a larger
// batch pipelines several runs in one round trip.
const fencedChunk = 128

// fencedScript writes the outcome of every key of KEYS whose value is still
// its claim's token, and replies with the number of keys it wrote. ARGV:
// per key its token and its outcome (ARGV[2i-1], ARGV[2i]), then the
// outcome's TTL in milliseconds, once, as the last argument.
var fencedScript = redis.NewScript(`
local vs = redis.call('MGET', unpack(KEYS))
local px = ARGV[#ARGV]
local n = 0
for i = 1, #KEYS do
	if vs[i] == ARGV[2*i-1] then
		redis.call('PSETEX', KEYS[i], px, ARGV[2*i])
		n = n + 1
	end
end
return n
`)

// FencedDedupe is the least a fenced dedupe does in Redis 7.0 per batch of
// messages, with no library: a benchmark's limit for a store that fences
// its outcome writes. [FencedDedupe.Claim] sends one pipeline of
// SET key token NX PX lease+retention, each key with a token of its own (8
// bytes of math/rand/v2, as redisstore draws its tokens);
// [FencedDedupe.Complete] writes the outcome of the keys it claimed, each
// only while the key still holds its token, through one Lua script per
// chunk of at most 128 keys (an MGET of the chunk, then a PSETEX of the
// retention per key that still holds its token, a little cheaper for the
// server than SET PX; the retention in milliseconds is passed once, as the
// script's last argument), the scripts pipelined in
// one round trip. A compare-and-set in one atomic step exists in Redis 7.0
// only as a script: WATCH/MULTI/EXEC costs the server more.
//
// It keeps neither fingerprints, attempts nor takeovers: it is not a store.
// [NewRecordDedupe] returns one that stores a record of a store's size.
//
// A FencedDedupe is for one goroutine: it keeps the last claim's keys and
// tokens until Complete, in buffers it reuses from batch to batch. Its
// client is of one server (MGET needs the chunk's keys on one node).
type FencedDedupe struct {
	pipe      redis.Pipeliner
	prefix    string
	claimTTL  int64 // ms: lease + retention
	retention any   // ms, the scripts' last argument, boxed once

	record int // bytes of a claim's value: 8, the token, or NewRecordDedupe's size

	keys    []string // the last Claim's keys, prefixed
	tokens  []byte   // their tokens, record bytes each
	setnx   []redis.Cmder
	claimed []bool
	won     []string // the keys the last Claim claimed
	wonTok  []any    // their tokens, boxed once for both commands
	args    []any
	runs    []*redis.Cmd
}

// NewFencedDedupe returns a FencedDedupe over c: its keys are prefix plus
// the caller's keys, a claim lives lease+retention, an outcome retention
// (both in whole milliseconds).
func NewFencedDedupe(c *redis.Client, prefix string, lease, retention time.Duration) *FencedDedupe {
	return &FencedDedupe{
		pipe:      c.Pipeline(),
		prefix:    prefix,
		claimTTL:  (lease + retention).Milliseconds(),
		retention: retention.Milliseconds(),
		record:    8,
	}
}

// NewRecordDedupe returns a FencedDedupe that keeps, as an idempotency
// store does, a record of size bytes per key (at least 8): its claim
// writes a value of that size (the token, then zeros) with SET … NX GET,
// which answers a duplicate's record in the same round trip, and Complete
// writes that value followed by the outcome, comparing the whole value
// first. It is the least a fenced dedupe does in Redis per key when it
// keeps a record as large as a store's (redisstore's: 24 bytes of header
// and the fingerprint), and no more than that: no attempt, no takeover.
func NewRecordDedupe(c *redis.Client, prefix string, lease, retention time.Duration, size int) *FencedDedupe {
	f := NewFencedDedupe(c, prefix, lease, retention)
	f.record = max(size, 8)
	return f
}

// Claim claims keys in one pipeline of SET NX PX, each with a token of its
// own, and reports which it claimed: not those another claim holds or whose
// outcome is stored, nor a key's later copies in keys. The slice is valid
// until the next Claim. The keys claimed are those [FencedDedupe.Complete]
// writes.
func (f *FencedDedupe) Claim(ctx context.Context, keys []string) ([]bool, error) {
	f.keys, f.setnx, f.won, f.wonTok = f.keys[:0], f.setnx[:0], f.won[:0], f.wonTok[:0]
	n := f.record
	f.tokens = slices.Grow(f.tokens[:0], n*len(keys))[:n*len(keys)]
	clear(f.tokens)
	f.claimed = slices.Grow(f.claimed[:0], len(keys))[:len(keys)]
	for i, k := range keys {
		t := f.tokens[n*i : n*i+n : n*i+n]
		binary.LittleEndian.PutUint64(t, rand.Uint64())
		key := f.prefix + k
		var cmd redis.Cmder
		if n == 8 {
			cmd = redis.NewBoolCmd(ctx, "set", key, t, "px", f.claimTTL, "nx")
		} else {
			cmd = redis.NewStringCmd(ctx, "set", key, t, "px", f.claimTTL, "nx", "get")
		}
		_ = f.pipe.Process(ctx, cmd)
		f.keys = append(f.keys, key)
		f.setnx = append(f.setnx, cmd)
	}
	if len(keys) == 0 {
		return f.claimed, nil
	}
	if _, err := f.pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for i, cmd := range f.setnx {
		switch cmd := cmd.(type) {
		case *redis.BoolCmd:
			f.claimed[i] = cmd.Val()
		case *redis.StringCmd: // SET … NX GET: no old value when it set the key
			f.claimed[i] = errors.Is(cmd.Err(), redis.Nil)
		}
		if f.claimed[i] {
			f.won = append(f.won, f.keys[i])
			f.wonTok = append(f.wonTok, cmd.Args()[2]) // the token, boxed already
		}
	}
	return f.claimed, nil
}

// Complete writes outcome, with a TTL of the retention, to every key the
// last [FencedDedupe.Claim] claimed whose value is still its token, and
// returns an error unless it wrote every one of them: a limit that wrote
// nothing would measure nothing. It takes one round trip (EVALSHA), and a
// second (EVAL) when the server does not hold the script yet.
func (f *FencedDedupe) Complete(ctx context.Context, outcome []byte) error {
	want := len(f.won)
	if want == 0 {
		return nil
	}
	var out any = outcome
	args := func(lo, hi int) []any {
		f.args = f.args[:0]
		for i := lo; i < hi; i++ {
			if f.record == 8 {
				f.args = append(f.args, f.wonTok[i], out)
			} else { // the record, then the outcome
				f.args = append(f.args, f.wonTok[i], append(slices.Clip(f.wonTok[i].([]byte)), outcome...))
			}
		}
		return append(f.args, f.retention)
	}
	f.runs = f.runs[:0]
	for lo := 0; lo < want; lo += fencedChunk {
		hi := min(lo+fencedChunk, want)
		f.runs = append(f.runs, fencedScript.EvalSha(ctx, f.pipe, f.won[lo:hi], args(lo, hi)...))
	}
	_, _ = f.pipe.Exec(ctx) // each run carries its own error
	again := false
	for k, run := range f.runs {
		if redis.HasErrorPrefix(run.Err(), "NOSCRIPT") { // it did not run: send the script itself
			lo := k * fencedChunk
			f.runs[k] = fencedScript.Eval(ctx, f.pipe, f.won[lo:min(lo+fencedChunk, want)], args(lo, min(lo+fencedChunk, want))...)
			again = true
		}
	}
	if again {
		_, _ = f.pipe.Exec(ctx)
	}
	written := int64(0)
	for _, run := range f.runs {
		n, err := run.Int64()
		if err != nil {
			return err
		}
		written += n
	}
	if written != int64(want) {
		return fmt.Errorf("redisstoretest: FencedDedupe wrote %d of the %d outcomes it claimed", written, want)
	}
	return nil
}
