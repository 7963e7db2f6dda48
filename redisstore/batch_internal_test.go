package redisstore

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/idemgo/idem/storage"
)

// TestExceptionReplies: a batch script's list of exceptions gives the
// entries it names their answers and every other entry the common one;
// a list that names an entry twice, out of order or out of the call, or
// is not pairs of an index and an answer, is a bad reply for every entry
// of its call, never an answer to the wrong entry.
func TestExceptionReplies(t *testing.T) {
	call := func(size int, reply any) *evalCmd {
		cmd := newEval(context.Background(), completeBatchScript, atMostOnce, []any{"evalsha", completeBatchScript.sha, size})
		cmd.SetVal(reply)
		return cmd
	}
	r := exceptionReplies("CompleteBatch", []*evalCmd{
		call(3, []any{}),
		call(4, []any{int64(2), int64(replyLost), int64(4), int64(replyUnknown)}),
	}, 7, replyDone)
	want := []int64{replyDone, replyDone, replyDone, replyDone, replyLost, replyDone, replyUnknown}
	for i, w := range want {
		if r.errs[i] != nil || r.replies[i] != w {
			t.Errorf("entry %d: %v %v, want %d", i, r.replies[i], r.errs[i], w)
		}
	}
	for _, bad := range []any{
		[]any{int64(1)},
		[]any{int64(0), int64(replyLost)},
		[]any{int64(4), int64(replyLost)},
		[]any{int64(2), int64(replyLost), int64(2), int64(replyLost)},
		[]any{int64(3), int64(replyLost), int64(1), int64(replyLost)},
		[]any{"1", int64(replyLost)},
		int64(replyDone),
		"OK",
	} {
		r := exceptionReplies("CompleteBatch", []*evalCmd{call(2, []any{}), call(3, bad)}, 5, replyDone)
		for i := range 5 {
			if i < 2 && (r.errs[i] != nil || r.replies[i] != int64(replyDone)) {
				t.Errorf("%#v: entry %d of the good call: %v %v", bad, i, r.replies[i], r.errs[i])
			}
			if i >= 2 && (!errors.Is(r.errs[i], storage.ErrStoreUnavailable) || r.replies[i] != nil) {
				t.Errorf("%#v: entry %d: %v %v, want a bad reply", bad, i, r.replies[i], r.errs[i])
			}
		}
	}
}

// FuzzExceptionReplies: whatever list a batch script answers, reading it
// never panics, and each entry of the call gets either an answer or the
// call's bad-reply error, never both, never neither.
func FuzzExceptionReplies(f *testing.F) {
	seed := func(vs ...int64) []byte { // each value as the signed byte the fuzz function reads
		b := make([]byte, len(vs))
		for i, v := range vs {
			b[i] = byte(int8(v))
		}
		return b
	}
	f.Add(3, seed())
	f.Add(4, seed(2, replyLost, 4, replyUnknown))
	f.Add(2, seed(3, replyLost))
	f.Add(2, seed(1))
	f.Add(5, seed(2, replyLost, 2, replyLost))
	f.Fuzz(func(t *testing.T, size int, raw []byte) {
		size = max(0, min(size, 1<<10))
		list := make([]any, len(raw))
		for i, b := range raw {
			list[i] = int64(int8(b))
		}
		cmd := newEval(context.Background(), completeBatchScript, atMostOnce, []any{"evalsha", completeBatchScript.sha, size})
		cmd.SetVal(list)
		r := exceptionReplies("CompleteBatch", []*evalCmd{cmd}, size, replyDone)
		for i := range size {
			if (r.errs[i] == nil) == (r.replies[i] == nil) {
				t.Fatalf("size %d, list %v: entry %d got %v and %v", size, list, i, r.replies[i], r.errs[i])
			}
		}
	})
}

// TestHeldIsBounded: held keeps two generations of records at most; the
// records of the generation before the last two are forgotten, the others
// taken once each.
func TestHeldIsBounded(t *testing.T) {
	var h held
	const n = 2*heldGeneration + heldGeneration/2
	ts, vs, at := make([]storage.Token, n), make([][]byte, n), make([]int, n)
	for i := range n {
		ts[i], vs[i], at[i] = storage.Token(i+1), []byte{byte(i + 1)}, i
	}
	h.put(ts[:n/2], vs, at[:n/2]) // in two calls: a generation ends within a call
	h.put(ts, vs, at[n/2:])
	if got := len(h.cur) + len(h.old); got > 2*heldGeneration {
		t.Fatalf("held keeps %d records, more than two generations of %d", got, heldGeneration)
	}
	cs := make([]storage.Completion, n)
	for i := range cs {
		cs[i].Token = storage.Token(i + 1)
	}
	for i, v := range h.take(cs) {
		// Tokens 1..G filled the first generation, which the third one
		// pushed out; G+1..2G are the old generation, the rest the
		// current one.
		if kept := i >= heldGeneration; kept != (v != nil) || kept && (len(v) != 1 || v[0] != byte(i+1)) {
			t.Fatalf("token %d: %v, kept %v", i+1, v, kept)
		}
	}
	if again := h.take(cs); slices.IndexFunc(again, func(v []byte) bool { return v != nil }) >= 0 {
		t.Fatal("a record was taken twice")
	}
}

// TestHeldIsBoundedInBytes: records with the longest fingerprints fill a
// generation by size before they fill it by count: held keeps two
// generations' worth of bytes at most, and still hands back the latest
// records whole.
func TestHeldIsBoundedInBytes(t *testing.T) {
	var h held
	rec := make([]byte, headerLen+maxFingerprint) // about 64 KiB
	const n = 1024                                // 64 MiB of records, far under heldGeneration
	ts, vs, at := make([]storage.Token, n), make([][]byte, n), make([]int, n)
	for i := range n {
		ts[i], vs[i], at[i] = storage.Token(i+1), rec, i
	}
	for lo := 0; lo < n; lo += 100 {
		h.put(ts, vs, at[lo:min(lo+100, n)])
	}
	bytes := 0
	for _, m := range []map[storage.Token][]byte{h.cur, h.old} {
		for _, v := range m {
			bytes += len(v)
		}
	}
	if bytes > 2*heldGenerationBytes {
		t.Fatalf("held keeps %d bytes of records, more than two generations of %d", bytes, heldGenerationBytes)
	}
	if got := h.take([]storage.Completion{{Token: ts[n-1]}}); len(got[0]) != len(rec) {
		t.Fatalf("the latest record: %d bytes, want %d", len(got[0]), len(rec))
	}
}
