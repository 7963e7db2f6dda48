package storage_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/storage"
)

// eachStore is a store without batch calls of its own: it answers them
// with ClaimEach and CompleteEach, as the package documents.
type eachStore struct{ storage.Store }

func (s eachStore) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	return storage.ClaimEach(ctx, s, args)
}

func (s eachStore) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	return storage.CompleteEach(ctx, s, cs)
}

var newMem = idemtest.MemStore

// A store whose batches are ClaimEach and CompleteEach passes the whole
// conformance suite, batch cases and the Guard's DoBatch cases included.
func TestEachConformance(t *testing.T) {
	idemtest.Run(t, func(t *testing.T) storage.Store { return eachStore{newMem(t)} })
}

// outage is a store that cannot be reached from its after-th Claim on.
type outage struct {
	eachStore
	after int
	calls int
}

func (s *outage) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if s.calls++; s.calls > s.after {
		return storage.Claim{}, fmt.Errorf("dial: %w", storage.ErrStoreUnavailable)
	}
	return s.eachStore.Claim(ctx, a)
}

// A batch that fails as a whole claimed nothing: the entries acquired
// before the failure are released, so the next claim of each takes over at
// once; an entry's own error stays in its Claim.
func TestClaimEachFailureReleases(t *testing.T) {
	ctx := context.Background()
	mem := newMem(t)
	args := func(k, fp string) storage.ClaimArgs {
		return storage.ClaimArgs{Key: k, Fingerprint: []byte(fp), Lease: time.Hour, Retention: time.Hour}
	}
	if _, err := mem.Claim(ctx, args("reused", "first")); err != nil {
		t.Fatal(err)
	}
	s := &outage{eachStore: eachStore{mem}, after: 3}
	got, err := storage.ClaimEach(ctx, s, []storage.ClaimArgs{args("a", "fp"), args("reused", "other"), args("b", "fp"), args("c", "fp")})
	if !errors.Is(err, storage.ErrStoreUnavailable) || got != nil {
		t.Fatalf("ClaimEach through an outage at the 4th entry: %v, %v; want the outage as the batch's error", got, err)
	}
	for _, k := range []string{"a", "b"} {
		cl, err := mem.Claim(ctx, args(k, "fp"))
		if err != nil || cl.Outcome != storage.Acquired || cl.Record.Attempt != 2 {
			t.Errorf("%s after the failed batch: %v attempt %d, %v; want Acquired at once (released), attempt 2", k, cl.Outcome, cl.Record.Attempt, err)
		}
	}
	if _, err := mem.Get(ctx, "c"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("c, past the failure, was claimed: %v", err)
	}

	// Without an outage, an entry's error is its own.
	got, err = storage.ClaimEach(ctx, eachStore{mem}, []storage.ClaimArgs{args("reused", "other"), args("d", "fp")})
	if err != nil || len(got) != 2 || !errors.Is(got[0].Err, storage.ErrKeyReused) || got[1].Outcome != storage.Acquired {
		t.Fatalf("ClaimEach with a reused key: %+v, %v; want ErrKeyReused in its entry and the other Acquired", got, err)
	}
}
