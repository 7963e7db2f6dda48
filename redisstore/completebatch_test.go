package redisstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// TestCompleteBatchRepeatsAKey: an entry that completes a key an earlier
// entry of the same batch completed finds a finished record, as it would
// in a batch of its own: ErrLeaseLost, and the first outcome stays. The
// batch script reads its keys' records once, up front, so the store must
// not put a key twice in one call.
func TestCompleteBatchRepeatsAKey(t *testing.T) {
	s, h, args := batchFixture(t, 4)
	ctx := ctxT(t)
	got, err := s.ClaimBatch(ctx, args[1:])
	if err != nil {
		t.Fatal(err)
	}
	cs := []storage.Completion{
		{Key: args[1].Key, Token: got[0].Token, Value: []byte("first"), Retention: time.Minute},
		{Key: args[2].Key, Token: got[1].Token, Value: []byte("other"), Retention: time.Minute},
		{Key: args[1].Key, Token: got[0].Token, Value: []byte("second"), Retention: time.Minute},
		{Key: args[3].Key, Token: got[2].Token, Value: []byte("third"), Retention: time.Minute},
	}
	h.reset()
	errs, err := s.CompleteBatch(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	if cmds, pipes := h.seen(); len(cmds) != 0 || len(pipes) != 1 || pipes[0] != 2 {
		t.Fatalf("CompleteBatch sent commands %v and pipelines of %v; want one pipeline of two scripts", cmds, pipes)
	}
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], idem.ErrLeaseLost) || errs[3] != nil {
		t.Fatalf("CompleteBatch: %v, want [nil nil ErrLeaseLost nil]", errs)
	}
	for _, c := range []storage.Completion{cs[0], cs[1], cs[3]} {
		if r, err := s.Get(ctx, c.Key); err != nil || r.Status != storage.StatusCompleted || string(r.Result) != string(c.Value) {
			t.Errorf("%s: %v %q %v, want Completed with %q", c.Key, r.Status, r.Result, err, c.Value)
		}
	}
}

// TestCompleteBatchRetentions: each entry keeps its own retention, in its
// key's expiry and in the expiry its record reports, when the retentions
// of one batch differ.
func TestCompleteBatchRetentions(t *testing.T) {
	s, _, args := batchFixture(t, 5)
	ctx := ctxT(t)
	got, err := s.ClaimBatch(ctx, args[1:])
	if err != nil {
		t.Fatal(err)
	}
	retentions := []time.Duration{time.Hour, time.Hour, 3 * time.Hour, time.Hour}
	cs := make([]storage.Completion, len(got))
	for i, c := range got {
		cs[i] = storage.Completion{Key: args[i+1].Key, Token: c.Token, Value: []byte("v"), Retention: retentions[i]}
	}
	start := time.Now()
	errs, err := s.CompleteBatch(ctx, cs)
	if err != nil || errors.Join(errs...) != nil {
		t.Fatalf("CompleteBatch: %v %v", err, errs)
	}
	end := time.Now()
	c := sharedClient(t)
	for i, x := range cs {
		r, err := s.Get(ctx, x.Key)
		if err != nil {
			t.Fatal(err)
		}
		// The record reports the client's reckoning; the key expires on the
		// server's clock: both within the call's span of the retention, a
		// second's slack for the server's clock.
		lo, hi := start.Add(x.Retention).Add(-time.Second), end.Add(x.Retention).Add(time.Second)
		if r.ExpiresAt.Before(lo) || r.ExpiresAt.After(hi) {
			t.Errorf("entry %d: the record expires at %v, want %v after the call", i, r.ExpiresAt, x.Retention)
		}
		ttl, err := c.PTTL(ctx, s.RedisKey(x.Key)).Result()
		if err != nil || ttl > x.Retention || ttl < x.Retention-time.Minute {
			t.Errorf("entry %d: the key has %v to live (%v), want about %v", i, ttl, err, x.Retention)
		}
	}
}
