package pgstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/idemgo/idem"
	"github.com/jackc/pgx/v5"
)

// ClaimBatch implements [idem.BatchClaimer]: each entry is claimed as Claim
// would, in one round trip.
//
// Distinct keys are claimed by one statement over unnest(…) arrays, which
// inserts (and so locks) the rows in key order: concurrent batches sharing
// keys never deadlock. A key that appears again in the batch is claimed in
// order, the later entry seeing the earlier one's result (usually Busy
// behind an Acquired): the n-th entries of repeated keys form the n-th
// statement, and the statements are pipelined in one round trip and one
// implicit transaction.
//
// A fingerprint mismatch is that entry's Err (idem.ErrKeyReused); the error
// returned is for the whole batch, which then claimed nothing.
func (s *Store) ClaimBatch(ctx context.Context, args []idem.ClaimArgs) ([]idem.Claim, error) {
	out := make([]idem.Claim, len(args))
	if len(args) == 0 {
		return out, nil
	}
	for _, a := range args {
		if err := validClaim("ClaimBatch", a); err != nil {
			return nil, err
		}
	}
	rounds := claimRounds(args)
	if len(rounds) == 1 {
		rows, err := s.db.Query(ctx, s.q.claimBatch, claimArrays(args, rounds[0])...)
		if err != nil {
			return nil, translate("claim batch", err)
		}
		if err := scanClaims(rows, args, rounds[0], out); err != nil {
			return nil, translate("claim batch", err)
		}
		return out, nil
	}
	b := &pgx.Batch{}
	for _, r := range rounds {
		b.Queue(s.q.claimBatch, claimArrays(args, r)...)
	}
	br := s.db.SendBatch(ctx, b)
	for _, r := range rounds {
		rows, err := br.Query()
		if err == nil {
			err = scanClaims(rows, args, r, out)
		}
		if err != nil {
			br.Close()
			return nil, translate("claim batch", err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, translate("claim batch", err)
	}
	return out, nil
}

// claimRounds splits the indexes of args so that no key repeats within a
// round: round n holds the n-th entry of every key.
func claimRounds(args []idem.ClaimArgs) [][]int {
	seen := make(map[string]int, len(args))
	var rounds [][]int
	for i, a := range args {
		n := seen[a.Key]
		seen[a.Key] = n + 1
		if n == len(rounds) {
			rounds = append(rounds, make([]int, 0, len(args)-i))
		}
		rounds[n] = append(rounds[n], i)
	}
	return rounds
}

// claimArrays returns the statement's parameters for the entries idx of args.
func claimArrays(args []idem.ClaimArgs, idx []int) []any {
	keys := make([][]byte, len(idx))
	fps := make([][]byte, len(idx))
	leases := make([]time.Duration, len(idx))
	retentions := make([]time.Duration, len(idx))
	caps := make([]int32, len(idx))
	for n, i := range idx {
		a := args[i]
		keys[n], fps[n] = []byte(a.Key), fingerprint(a)
		leases[n], retentions[n] = micros(a.Lease), micros(a.Retention)
		caps[n] = maxAttempts(a.MaxAttempts)
	}
	return []any{keys, fps, leases, retentions, caps, tooManyAttempts}
}

// scanClaims reads one round's rows into out and closes rows.
func scanClaims(rows pgx.Rows, args []idem.ClaimArgs, idx []int, out []idem.Claim) error {
	defer rows.Close()
	got := 0
	for rows.Next() {
		var i int64
		var r claimRow
		if err := rows.Scan(&i, &r.status, &r.token, &r.attempt, &r.sameFingerprint, &r.leaseUntil,
			&r.result, &r.expiresAt, &r.acquired); err != nil {
			return err
		}
		if i < 1 || int(i) > len(idx) {
			return errors.New("claim batch answered an entry it was not asked")
		}
		k := idx[i-1]
		c, err := r.claim(args[k])
		if err != nil && !errors.Is(err, idem.ErrKeyReused) {
			return err
		}
		c.Err = err
		out[k] = c
		got++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if got != len(idx) {
		return errors.New("claim batch answered fewer entries than asked")
	}
	return nil
}

// CompleteBatch implements [idem.BatchCompleter] with one UPDATE over
// unnest(…) arrays, the rows locked in key order. An entry whose key and
// token repeat an earlier entry's gets idem.ErrLeaseLost, as a second
// Complete would: the first one either completed the record or found the
// token not current.
func (s *Store) CompleteBatch(ctx context.Context, cs []idem.Completion) ([]error, error) {
	errs := make([]error, len(cs))
	if len(cs) == 0 {
		return errs, nil
	}
	idx := make([]int, 0, len(cs))
	for i, c := range cs {
		if c.Retention <= 0 {
			return nil, errors.New("pgstore: CompleteBatch: retention must be positive")
		}
		errs[i] = idem.ErrLeaseLost // until its row comes back
		if c.Token != 0 {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(i, j int) int {
		if c := bytes.Compare([]byte(cs[i].Key), []byte(cs[j].Key)); c != 0 {
			return c
		}
		return cmp.Compare(cs[i].Token, cs[j].Token)
	})
	idx = slices.CompactFunc(idx, func(i, j int) bool { return cs[i].Key == cs[j].Key && cs[i].Token == cs[j].Token })
	if len(idx) == 0 {
		return errs, nil
	}
	keys := make([][]byte, len(idx))
	tokens := make([]int64, len(idx))
	values := make([][]byte, len(idx))
	retentions := make([]time.Duration, len(idx))
	for n, i := range idx {
		c := cs[i]
		keys[n], tokens[n], values[n], retentions[n] = []byte(c.Key), int64(c.Token), c.Value, micros(c.Retention)
	}
	rows, err := s.db.Query(ctx, s.q.completeBatch, keys, tokens, values, retentions)
	if err != nil {
		return nil, translate("complete batch", err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int64
		if err := rows.Scan(&i); err != nil {
			return nil, translate("complete batch", err)
		}
		if i < 1 || int(i) > len(idx) {
			return nil, errors.New("pgstore: complete batch: answered an entry it was not asked")
		}
		errs[idx[i-1]] = nil
	}
	if err := rows.Err(); err != nil {
		return nil, translate("complete batch", err)
	}
	return errs, nil
}
