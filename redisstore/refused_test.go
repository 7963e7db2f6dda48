package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/coalesce"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// A key that Redis answers but the store refuses — a Redis key of another
// type, written by another program, or a fingerprint longer than the
// store keeps — is that key's ErrRefused: not an outage, never run
// unguarded under FailOpen, and the other keys of a batch (a consumer's,
// or coalesce's batch of other callers) go on.
func TestRefusedKeyThroughAGuard(t *testing.T) {
	c := sharedClient(t)
	s := newStore(t, c, redisstore.Config{})
	ctx := ctxT(t)
	g := idemtest.Guard(t, s, idem.Config{FailOpen: true})
	hashKey := s.RedisKey(string(storage.AppendStoreKey(nil, "", "", "hash")))
	if err := c.HSet(ctx, hashKey, "status", "completed").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), hashKey) })

	var ran atomic.Int32
	fn := func(context.Context) ([]byte, error) { ran.Add(1); return []byte("ok"), nil }
	if _, err := g.Do(ctx, "hash", nil, fn); !errors.Is(err, idem.ErrRefused) || errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("Do of a key holding a hash: %v, want ErrRefused and not ErrStoreUnavailable", err)
	}
	if ran.Load() != 0 {
		t.Fatal("FailOpen ran the operation of a key Redis answered for")
	}

	ops := []idem.BatchOp{{Key: "one"}, {Key: "hash"}, {Key: "two"}}
	res := g.DoBatch(ctx, ops, func(context.Context, int) ([]byte, error) { ran.Add(1); return []byte("ok"), nil })
	if !errors.Is(res[1].Err, idem.ErrRefused) || res[0].Err != nil || res[2].Err != nil {
		t.Errorf("DoBatch around a key holding a hash: %v, %v, %v; want only the hash's ErrRefused", res[0].Err, res[1].Err, res[2].Err)
	}
	if n := ran.Load(); n != 2 {
		t.Errorf("DoBatch ran fn %d times, want 2", n)
	}

	// A fingerprint over the store's 65535 bytes: redisstore refuses the
	// whole ClaimBatch holding it (ErrInvalidArgs) before it sends it.
	huge := idem.Config{Fingerprint: func(dst, payload []byte) []byte { return append(dst, payload...) }}
	gh := idemtest.Guard(t, coalesce.New(s), huge)
	ops = make([]idem.BatchOp, 8)
	for i := range ops {
		ops[i] = idem.BatchOp{Key: fmt.Sprintf("fp-%d", i), Payload: []byte("small")}
	}
	ops[3].Payload = make([]byte, 70_000)
	ran.Store(0)
	res = gh.DoBatchIndependent(ctx, ops, func(context.Context, int) ([]byte, error) { ran.Add(1); return []byte("ok"), nil })
	for i, r := range res {
		if want := i == 3; errors.Is(r.Err, redisstore.ErrInvalidArgs) != want || (!want && r.Err != nil) {
			t.Errorf("op %d: %v (want ErrInvalidArgs: %v)", i, r.Err, want)
		}
	}
	if n := ran.Load(); n != 7 {
		t.Errorf("fn ran %d times, want 7", n)
	}
}
