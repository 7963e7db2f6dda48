package redisstore

import (
	"context"
	"errors"
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
