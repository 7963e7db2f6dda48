package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemgo/idem/storage"
)

// ClaimBatch implements [storage.Store.ClaimBatch]: each entry is claimed as Claim
// would. It reads the entries' records first: a duplicate, a busy key or
// another fingerprint is answered from the read, with no write and no
// lock, so a batch of duplicates writes nothing. The other entries (new
// keys, takeovers, the attempt cap) are claimed in one BEGIN IMMEDIATE
// transaction, in the batch's order: one sync to disk for all of them. A
// key that appears again in the batch is claimed in that transaction, in
// order, the later entry seeing the earlier one's result (usually Busy
// behind an Acquired).
//
// A fingerprint mismatch is that entry's Err (storage.ErrKeyReused), and so is
// a stored result longer than Config.MaxValueSize (*storage.ValueTooLargeError);
// the error returned is for the whole batch, which then claimed nothing.
func (s *Store) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	out := make([]storage.Claim, len(args))
	for _, a := range args {
		if err := validClaim("ClaimBatch", a); err != nil {
			return nil, err
		}
	}
	var pending []int
	seen := make(map[string]bool, len(args))
	for i, a := range args {
		if seen[a.Key] {
			pending = append(pending, i) // after the key's earlier entry
			continue
		}
		seen[a.Key] = true
		now := s.now()
		r, found, err := s.read(ctx, s.db, a.Key, s.cfg.MaxValueSize, now)
		if err != nil {
			return nil, translate(ctx, "claim batch", err)
		}
		if c, done, err := answer(a, &r, found, s.cfg.MaxValueSize, now); done {
			if err := entryErr(err); err != nil {
				return nil, err
			}
			c.Err = err
			out[i] = c
			continue
		}
		pending = append(pending, i)
	}
	if len(pending) == 0 {
		return out, nil
	}
	claimed := make([]storage.Claim, len(pending))
	err := s.inTx(ctx, "claim batch", func(ctx context.Context, tx *sql.Tx) error {
		for j, i := range pending {
			c, err := s.claimIn(ctx, tx, args[i], s.cfg.MaxValueSize)
			if err := entryErr(err); err != nil {
				return err
			}
			c.Err = err
			claimed[j] = c
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for j, i := range pending {
		out[i] = claimed[j]
	}
	return out, nil
}

// entryErr returns err when it fails a whole batch: any error but the
// ones of one entry.
func entryErr(err error) error {
	if err == nil || errors.Is(err, storage.ErrKeyReused) {
		return nil
	}
	if _, ok := errors.AsType[*storage.ValueTooLargeError](err); ok {
		return nil
	}
	return err
}

// CompleteBatch implements [storage.Store.CompleteBatch] in one BEGIN IMMEDIATE
// transaction, one sync to disk for the batch: each entry is Complete's
// fenced UPDATE, in order. A value over Config.MaxValueSize fails the whole
// batch with a *storage.ValueTooLargeError before anything is written. An entry
// whose key and token repeat an earlier entry's gets storage.ErrLeaseLost, as
// a second Complete would.
func (s *Store) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	errs := make([]error, len(cs))
	for _, c := range cs {
		switch {
		case c.Retention <= 0:
			return nil, fmt.Errorf("sqlitestore: CompleteBatch: retention %v must be positive", c.Retention)
		case len(c.Value) > s.cfg.MaxValueSize:
			return nil, &storage.ValueTooLargeError{Store: "sqlitestore", Size: len(c.Value), Max: s.cfg.MaxValueSize}
		}
	}
	if len(cs) == 0 {
		return errs, nil
	}
	err := s.inTx(ctx, "complete batch", func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		for i, c := range cs {
			errs[i] = nil
			if c.Token == 0 {
				errs[i] = fmt.Errorf("sqlitestore: complete batch (key %q): %w", c.Key, storage.ErrLeaseLost)
				continue
			}
			value := c.Value
			if value == nil {
				value = []byte{}
			}
			res, err := tx.ExecContext(ctx, s.q.finish, []byte(c.Key), int64(c.Token), now, statusCompleted, value, now+micros(c.Retention))
			if err != nil {
				return translate(ctx, "complete batch", err)
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				errs[i] = fmt.Errorf("sqlitestore: complete batch (key %q): %w", c.Key, storage.ErrLeaseLost)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}
