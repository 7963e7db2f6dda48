package storage

import (
	"context"
	"errors"
	"time"
)

// ClaimEach claims each of args with s.Claim, in order, and answers as
// [Store.ClaimBatch] does: an entry's own error (ErrKeyReused, or any error
// but an outage's) in that entry's Err, and the first error that wraps
// [ErrStoreUnavailable] or ends ctx as the batch's. A store without a batch
// call of its own implements ClaimBatch with it:
//
//	func (s *MyStore) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
//		return storage.ClaimEach(ctx, s, args)
//	}
//
// Such a batch takes a round trip per entry. When it fails as a whole,
// ClaimEach releases the entries it acquired before the failure, so that
// the next claim of each takes over at once; a store out of reach keeps
// them until their leases end, as it does a crashed holder's.
func ClaimEach(ctx context.Context, s Store, args []ClaimArgs) ([]Claim, error) {
	out := make([]Claim, len(args))
	for i, a := range args {
		c, err := s.Claim(ctx, a)
		if err != nil {
			if batchError(ctx, err) {
				release(ctx, s, args[:i], out[:i])
				return nil, err
			}
			c = Claim{Err: err}
		}
		out[i] = c
	}
	return out, nil
}

// release gives up the leases of the acquired claims of cs (made with
// args), ignoring errors: the batch's error is what its caller gets.
func release(ctx context.Context, s Store, args []ClaimArgs, cs []Claim) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	for i, c := range cs {
		if c.Err == nil && c.Outcome == Acquired {
			_ = s.Release(ctx, args[i].Key, c.Token)
		}
	}
}

// releaseTimeout bounds the releases of a failed [ClaimEach].
const releaseTimeout = 5 * time.Second

// CompleteEach completes each of cs with s.Complete, in order, and answers
// as [Store.CompleteBatch] does: an entry's own error (ErrLeaseLost, a
// value too large) in its place, and the first error that wraps
// [ErrStoreUnavailable] or ends ctx as the batch's. A store without a batch
// call of its own implements CompleteBatch with it.
func CompleteEach(ctx context.Context, s Store, cs []Completion) ([]error, error) {
	errs := make([]error, len(cs))
	for i, c := range cs {
		err := s.Complete(ctx, c.Key, c.Token, c.Value, c.Retention)
		if err != nil && batchError(ctx, err) {
			return nil, err
		}
		errs[i] = err
	}
	return errs, nil
}

// batchError reports whether err, returned for one entry, is the batch's:
// the store is out of reach, or the caller's context ended.
func batchError(ctx context.Context, err error) bool {
	return errors.Is(err, ErrStoreUnavailable) || ctx.Err() != nil
}
