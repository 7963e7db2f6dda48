package dynamostore

import (
	"context"
	"errors"
	"sync"

	"github.com/idemgo/idem/storage"
)

// ClaimBatch implements [storage.Store.ClaimBatch]: the Claim of every entry,
// Config.BatchConcurrency conditional writes in flight at once, so a batch
// costs about the latency of its slowest claim rather than the sum of them.
// Entries for the same key are claimed one after the other, in order, the
// second seeing the first.
//
// DynamoDB has no batch write that fits. BatchWriteItem takes no
// condition, so it cannot claim anything safely. TransactWriteItems takes
// conditions but is all or nothing: one key already taken (a duplicate,
// the common case in a redelivered batch) would cancel the claims of all
// the others, to be sent again; it refuses two entries for one key; and it
// costs twice the write capacity. (dynalite, the server this package is
// tested against, has no TransactWriteItems either.) Separate conditional
// writes claim each key as Claim does, and each answers for itself.
//
// A Claim's Err holds storage.ErrKeyReused or ErrUnknownFormat for its key,
// or the error of a claim that could not be made (its key may be claimed
// or not; it answers Busy until its lease ends if it was). The returned
// error is ErrInvalidArgs when an entry is out of range (nothing is sent),
// or the first entry's error when no entry got an answer.
func (s *Store) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	for _, a := range args {
		if err := checkClaim("ClaimBatch", a); err != nil {
			return nil, err
		}
	}
	out := make([]storage.Claim, len(args))
	errs := make([]error, len(args))
	s.each(len(args), func(i int) string { return args[i].Key }, func(i int) {
		out[i], errs[i] = s.claim(ctx, args[i])
	})
	for i, err := range errs {
		if err != nil {
			out[i] = storage.Claim{Err: err}
		}
	}
	if err := allFailed(errs, storage.ErrKeyReused, ErrUnknownFormat); err != nil {
		return nil, err
	}
	return out, nil
}

// CompleteBatch implements [storage.Store.CompleteBatch]: the Complete of every
// entry, as ClaimBatch runs its claims (a transaction would let one lost
// lease refuse every other outcome). Each entry's error is nil,
// storage.ErrLeaseLost, or the error of an outcome that could not be written
// (it may or may not be stored). The returned error is *storage.ValueTooLargeError
// or ErrInvalidArgs when an entry is out of range (nothing is written), or
// the first entry's error when no entry got an answer.
func (s *Store) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	for _, c := range cs {
		if err := s.checkOutcome("CompleteBatch", c.Key, c.Value, c.Retention); err != nil {
			return nil, err
		}
	}
	errs := make([]error, len(cs))
	s.each(len(cs), func(i int) string { return cs[i].Key }, func(i int) {
		c := cs[i]
		errs[i] = s.finish(ctx, "CompleteBatch", c.Key, c.Token, storage.StatusCompleted, c.Value, c.Retention)
	})
	if err := allFailed(errs, storage.ErrLeaseLost); err != nil {
		return nil, err
	}
	return errs, nil
}

// allFailed returns the first of errs when every entry failed with an
// error that is not an answer (not one of answers), and nil otherwise.
func allFailed(errs []error, answers ...error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			return nil
		}
		for _, a := range answers {
			if errors.Is(err, a) {
				return nil
			}
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// each calls do(i) for i in [0, n), the entries of one key (by key(i)) one
// after the other in order, different keys on up to
// Config.BatchConcurrency goroutines. It returns when every call has.
func (s *Store) each(n int, key func(int) string, do func(int)) {
	var groups [][]int
	byKey := make(map[string]int, n)
	for i := range n {
		g, ok := byKey[key(i)]
		if !ok {
			g = len(groups)
			byKey[key(i)] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	run := func(g []int) {
		for _, i := range g {
			do(i)
		}
	}
	if len(groups) == 1 {
		run(groups[0])
		return
	}
	next := make(chan []int)
	var wg sync.WaitGroup
	for range min(s.cfg.BatchConcurrency, len(groups)) {
		wg.Go(func() {
			for g := range next {
				run(g)
			}
		})
	}
	for _, g := range groups {
		next <- g
	}
	close(next)
	wg.Wait()
}
