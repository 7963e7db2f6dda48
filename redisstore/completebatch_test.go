package redisstore_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
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

// TestCompleteBatchHeldRecords: CompleteBatch sends the records that
// ClaimBatch created whole and writes the Completed record it built
// itself; a record it no longer holds is completed by its token as
// before. Both write the same record, byte for byte but the token and
// the expiry, in one batch.
func TestCompleteBatchHeldRecords(t *testing.T) {
	c := sharedClient(t)
	s := newStore(t, c, redisstore.Config{})
	ctx := ctxT(t)
	args := []storage.ClaimArgs{claimArgs("held-a"), claimArgs("held-b"), claimArgs("held-c")}
	got, err := s.ClaimBatch(ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Held(); n != len(args) {
		t.Fatalf("after ClaimBatch of %d new keys the store holds %d records, want %d", len(args), n, len(args))
	}
	s.ForgetHeld(got[1].Token) // completed by its token
	cs := make([]storage.Completion, len(got))
	for i, cl := range got {
		cs[i] = storage.Completion{Key: args[i].Key, Token: cl.Token, Value: []byte("paid"), Retention: time.Hour}
	}
	errs, err := s.CompleteBatch(ctx, cs)
	if err != nil || errors.Join(errs...) != nil {
		t.Fatalf("CompleteBatch: %v %v", errs, err)
	}
	if n := s.Held(); n != 0 {
		t.Errorf("after CompleteBatch the store still holds %d records", n)
	}
	raw := make([][]byte, len(args))
	for i, a := range args {
		if raw[i], err = c.Get(ctx, s.RedisKey(a.Key)).Bytes(); err != nil {
			t.Fatal(err)
		}
		r, err := s.Get(ctx, a.Key)
		if err != nil || r.Status != storage.StatusCompleted || r.Token != got[i].Token || r.Attempt != 1 ||
			string(r.Fingerprint) != "fp" || string(r.Result) != "paid" || time.Until(r.ExpiresAt) < 59*time.Minute {
			t.Errorf("%s: %+v %v, want Completed by its claim with paid for an hour", a.Key, r, err)
		}
		if ttl := c.PTTL(ctx, s.RedisKey(a.Key)).Val(); ttl < 59*time.Minute || ttl > time.Hour {
			t.Errorf("%s: the key expires in %v, want an hour", a.Key, ttl)
		}
	}
	masked := func(v []byte) string {
		v = slices.Clone(v)
		clear(v[2:10])  // token
		clear(v[14:22]) // expiry
		return string(v)
	}
	if masked(raw[0]) != masked(raw[1]) || masked(raw[2]) != masked(raw[1]) {
		t.Errorf("held and by-token completions wrote different records:\n%x\n%x\n%x", raw[0], raw[1], raw[2])
	}
}

// TestCompleteBatchHeldRecordOutlived: a record the store holds for a
// claim that has since ended — released, or taken over by another claim —
// no longer matches the key's, and its completion is refused as any stale
// holder's: ErrLeaseLost, the record as the key's current holder left it.
func TestCompleteBatchHeldRecordOutlived(t *testing.T) {
	c := sharedClient(t)
	s := newStore(t, c, redisstore.Config{})
	ctx := ctxT(t)
	args := []storage.ClaimArgs{claimArgs("outlived-released"), claimArgs("outlived-taken")}
	got, err := s.ClaimBatch(ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, args[0].Key, got[0].Token); err != nil {
		t.Fatal(err)
	}
	// End the second claim's lease on the server (the key lives the
	// retention past the lease end), and take the key over.
	if err := c.PExpire(ctx, s.RedisKey(args[1].Key), args[1].Retention).Err(); err != nil {
		t.Fatal(err)
	}
	other, err := s.Claim(ctx, args[1])
	if err != nil || other.Outcome != storage.Acquired || other.Record.Attempt != 2 {
		t.Fatalf("takeover: %+v %v, want Acquired, attempt 2", other, err)
	}
	errs, err := s.CompleteBatch(ctx, []storage.Completion{
		{Key: args[0].Key, Token: got[0].Token, Value: []byte("stale"), Retention: time.Hour},
		{Key: args[1].Key, Token: got[1].Token, Value: []byte("stale"), Retention: time.Hour},
	})
	if err != nil || !errors.Is(errs[0], idem.ErrLeaseLost) || !errors.Is(errs[1], idem.ErrLeaseLost) {
		t.Fatalf("CompleteBatch of outlived claims: %v %v, want ErrLeaseLost for both", errs, err)
	}
	if r, err := s.Get(ctx, args[0].Key); err != nil || r.Status != storage.StatusInProgress || r.Token != 0 {
		t.Errorf("released key: %+v %v, want InProgress with no token", r, err)
	}
	if r, err := s.Get(ctx, args[1].Key); err != nil || r.Status != storage.StatusInProgress || r.Token != other.Token {
		t.Errorf("taken-over key: %+v %v, want InProgress under the new claim", r, err)
	}
	if err := s.Complete(ctx, args[1].Key, other.Token, []byte("current"), time.Hour); err != nil {
		t.Errorf("the current holder's Complete: %v", err)
	}
}
