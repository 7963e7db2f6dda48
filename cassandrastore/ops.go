package cassandrastore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgo/idem/storage"
)

// Complete implements [storage.Store.Complete] with one UPDATE … IF
// conditioned on the record being the claim's (its token, InProgress, not
// expired, and its other columns as the claim wrote them). The record
// keeps the token and expires retention from now: its TTL, on every
// column, becomes the retention's.
//
// Cassandra's TTL is per cell, so each write rewrites every column of the
// record, and needs their values: the Store remembers them for the claims
// it made. A holder whose claim another Store made costs one more round:
// the first write's condition fails and returns the columns, and the
// second conditions on them.
//
// A write whose outcome Cassandra cannot tell is read back at
// SerialConsistency: Complete answers nil when the record holds this
// call's outcome, writes again when it still holds the claim, and answers
// ErrLeaseLost when it holds anything else.
//
// Errors: storage.ErrLeaseLost; *storage.ValueTooLargeError and
// ErrInvalidArgs (nothing sent); ErrUnknownFormat; ErrContention; driver
// failures wrapping storage.ErrStoreUnavailable.
func (s *Store) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	return s.finish(ctx, "Complete", key, t, statusCompleted, value, retention)
}

// Fail implements [storage.Store.Fail] as Complete does, storing cause.
func (s *Store) Fail(ctx context.Context, key string, t storage.Token, cause []byte, retention time.Duration) error {
	return s.finish(ctx, "Fail", key, t, statusFailed, cause, retention)
}

func (s *Store) checkOutcome(op, key string, value []byte, retention time.Duration) error {
	if len(value) > s.cfg.MaxValueSize {
		return &storage.ValueTooLargeError{Store: "cassandrastore", Size: len(value), Max: s.cfg.MaxValueSize}
	}
	return invalid(op, key, nil, retention)
}

func (s *Store) finish(ctx context.Context, op, key string, t storage.Token, status string, value []byte, retention time.Duration) error {
	if err := s.checkOutcome(op, key, value, retention); err != nil {
		return err
	}
	ret := ceilMillis(retention)
	return s.fenced(ctx, op, key, t, func(c clock, r *row) {
		r.status, r.leaseUntil, r.result, r.expiresAt = status, 0, nonNil(value), c.now+ret
	})
}

// Release implements [storage.Store.Release] with one UPDATE … IF
// conditioned as Complete's: the token becomes 0 and the lease end 0, so
// the next claim takes over at once, whatever its clock; the record's
// expiry does not change. A write whose outcome is unknown is read back,
// as Complete's is. Errors: storage.ErrLeaseLost; the others of Complete.
func (s *Store) Release(ctx context.Context, key string, t storage.Token) error {
	if err := invalid("Release", key, nil); err != nil {
		return err
	}
	return s.fenced(ctx, "Release", key, t, func(_ clock, r *row) { r.tok, r.leaseUntil = 0, 0 })
}

// Extend implements [storage.Store.Extend] with one UPDATE … IF
// conditioned as Complete's: the lease ends lease from now on this host's
// clock (later or sooner than it did), and the record expires the claim's
// retention after that. Errors: storage.ErrLeaseLost; ErrInvalidArgs; the
// others of Complete.
func (s *Store) Extend(ctx context.Context, key string, t storage.Token, lease time.Duration) error {
	if err := invalid("Extend", key, nil, lease); err != nil {
		return err
	}
	d := ceilMillis(lease)
	return s.fenced(ctx, "Extend", key, t, func(c clock, r *row) {
		r.leaseUntil = c.now + d
		r.expiresAt = r.leaseUntil + r.retention
	})
}

// fenced writes change(record) over the record of the claim t, if the
// record is still that claim's: InProgress, token t, not expired.
func (s *Store) fenced(ctx context.Context, op, key string, t storage.Token, change func(clock, *row)) error {
	if t == 0 { // never issued; 0 is a released record's token
		return storage.ErrLeaseLost
	}
	tok := int64(t)
	cur, known := s.recall(key, tok)
	if !known { // the condition fails on the other columns and returns them
		cur = row{status: statusInProgress, tok: tok}
	}
	c := s.clock()
	for range maxRounds {
		if known && (cur.status != statusInProgress || cur.tok != tok || cur.expiresAt < c.dead) {
			s.forget(key, tok)
			return storage.ErrLeaseLost
		}
		next := cur
		next.result = []byte{}
		change(c, &next)
		ok, got, _, err := s.writeRow(ctx, op, key, c, &cur, &next)
		if err != nil {
			return err
		}
		if ok {
			if next.status == statusInProgress && next.tok == tok {
				s.remember(key, &next)
			} else {
				s.forget(key, tok)
			}
			return nil
		}
		cur, known = got, true
	}
	return ErrContention
}

// Get implements [storage.Store.Get] with one SELECT at
// SerialConsistency, which sees every conditional write that completed,
// and completes one left in flight. A record that expired on this host's
// clock (less MaxClockSkew) but whose cells Cassandra has not dropped yet
// is ErrNotFound. Errors: storage.ErrNotFound; ErrUnknownFormat;
// *storage.ValueTooLargeError for an outcome longer than MaxValueSize;
// driver failures wrapping storage.ErrStoreUnavailable.
func (s *Store) Get(ctx context.Context, key string) (storage.Record, error) {
	if err := invalid("Get", key, nil); err != nil {
		return storage.Record{}, err
	}
	c := s.clock()
	r, err := s.get(ctx, "Get", key)
	if err != nil {
		return storage.Record{}, err
	}
	if r.absent() || r.expiresAt < c.dead {
		return storage.Record{}, storage.ErrNotFound
	}
	if r.status != statusInProgress && len(r.result) > s.cfg.MaxValueSize {
		return storage.Record{}, s.tooLarge(key, len(r.result))
	}
	return r.record(key), nil
}

// Delete implements [storage.Store.Delete] with one DELETE … IF EXISTS: a
// lightweight transaction too, as a plain write beside Paxos writes of the
// same partition can be ordered before them by its timestamp. A delete
// whose outcome is unknown is read back and sent again while the record
// is there. Errors: driver failures wrapping storage.ErrStoreUnavailable.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := invalid("Delete", key, nil); err != nil {
		return err
	}
	for range maxRounds {
		_, err := s.cas(ctx, "Delete", s.sess.Query(s.drop, []byte(key)), map[string]any{})
		if err == nil {
			return nil
		}
		if !unknown(err) {
			return s.translate("Delete", err)
		}
		r, rerr := s.get(ctx, "Delete", key)
		if rerr != nil {
			return fmt.Errorf("%w (the delete's outcome is unknown: %w)", rerr, err)
		}
		if r.absent() {
			return nil
		}
	}
	return ErrContention
}

// DeleteIf implements [storage.Store.DeleteIf] with one DELETE … IF
// conditioned on the status, the token and the record being live: when
// the condition fails, Cassandra's answer tells ErrNotFound (no live
// record) from storage.ErrChanged. A delete whose outcome is unknown is
// read back: a record gone is nil, one still as it was is deleted again.
// Errors: storage.ErrNotFound; storage.ErrChanged; ErrInvalidArgs; driver
// failures wrapping storage.ErrStoreUnavailable.
func (s *Store) DeleteIf(ctx context.Context, key string, status storage.Status, t storage.Token) error {
	if err := invalid("DeleteIf", key, nil); err != nil {
		return err
	}
	c := s.clock()
	st := statusOf(status) // "" for a status that is not one: no record has it
	for range maxRounds {
		m := make(map[string]any, 3)
		applied, err := s.cas(ctx, "DeleteIf", s.sess.Query(s.dropIf, []byte(key), st, int64(t), c.dead), m)
		var r row
		switch {
		case err == nil && applied:
			return nil
		case err == nil:
			if r, err = scanRow(m); err != nil {
				return err
			}
		case !unknown(err):
			return s.translate("DeleteIf", err)
		default:
			var rerr error
			if r, rerr = s.get(ctx, "DeleteIf", key); rerr != nil {
				return fmt.Errorf("%w (the delete's outcome is unknown: %w)", rerr, err)
			}
			if r.absent() {
				return nil
			}
			if r.status == st && r.tok == int64(t) && r.expiresAt >= c.dead {
				continue // not deleted, and never will be: again
			}
		}
		if r.absent() || r.expiresAt < c.dead {
			return storage.ErrNotFound
		}
		return storage.ErrChanged
	}
	return ErrContention
}

// ClaimBatch implements [storage.Store.ClaimBatch] with a Claim per entry,
// one after the other ([storage.ClaimEach]). Cassandra's conditional
// batches hold one partition, and every record is a partition of its own,
// so a batch of n keys costs n Paxos rounds whatever it is sent as; one
// after the other keeps the order of entries of one key for free.
func (s *Store) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	for _, a := range args {
		if err := invalidClaim("ClaimBatch", a); err != nil {
			return nil, err
		}
	}
	return storage.ClaimEach(ctx, s, args)
}

// CompleteBatch implements [storage.Store.CompleteBatch] with a Complete per
// entry, one after the other ([storage.CompleteEach]), for the reason
// ClaimBatch gives.
func (s *Store) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	for _, c := range cs {
		if err := s.checkOutcome("CompleteBatch", c.Key, c.Value, c.Retention); err != nil {
			return nil, err
		}
	}
	return storage.CompleteEach(ctx, s, cs)
}
