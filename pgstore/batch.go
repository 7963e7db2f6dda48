package pgstore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgo/idem/storage"
)

// ClaimBatch implements [storage.Store.ClaimBatch]: each entry is claimed as Claim
// would, in one round trip.
//
// Distinct keys are claimed by one statement over unnest(…) arrays sorted
// by key. It reads the keys' rows first: a duplicate, a busy key or
// another fingerprint is answered from the read, with no write and no row
// lock, so a batch of duplicates writes nothing. The other keys (new ones,
// takeovers, the attempt cap) are inserted or updated, and so locked, in
// key order: concurrent batches sharing keys never deadlock. A key that appears again in the
// batch is claimed in order, the later entry seeing the earlier one's
// result (usually Busy behind an Acquired): the n-th entries of repeated
// keys form the n-th statement, and the statements are pipelined in one
// round trip and one implicit transaction.
//
// ClaimBatch draws its tokens at random (64 bits from crypto/rand, never
// 0), where Claim takes them from the table's sequence: the client knows
// the token it proposed, and tells the keys it acquired without a join on
// the server. Either kind is unique for a key with overwhelming
// probability.
//
// A fingerprint mismatch is that entry's Err (storage.ErrKeyReused), and so is
// a stored result longer than Config.MaxValueSize (*storage.ValueTooLargeError) and
// a row this package did not write (a status it does not know): the other
// entries are claimed and answered. The error returned is for the whole
// batch (arguments out of range, the server not answering), which then
// claimed nothing: the statements of a batch commit together or not at all.
func (s *Store) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	out := make([]storage.Claim, len(args))
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
		r := newClaimRound(args, rounds[0], s.cfg.MaxValueSize)
		rows, err := s.db.Query(ctx, s.q.claimBatch, r.params...)
		if err != nil {
			return nil, translate("claim batch", err)
		}
		if err := r.scan(rows, args, out); err != nil {
			return nil, translate("claim batch", err)
		}
		return out, nil
	}
	b := &pgx.Batch{}
	rs := make([]claimRound, len(rounds))
	for i, idx := range rounds {
		rs[i] = newClaimRound(args, idx, s.cfg.MaxValueSize)
		b.Queue(s.q.claimBatch, rs[i].params...)
	}
	br := s.db.SendBatch(ctx, b)
	for _, r := range rs {
		rows, err := br.Query()
		if err == nil {
			err = r.scan(rows, args, out)
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
// round: round n holds the n-th entry of every key, in key order.
func claimRounds(args []storage.ClaimArgs) [][]int {
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
	for _, r := range rounds {
		// Byte order, as PostgreSQL orders bytea.
		slices.SortFunc(r, func(i, j int) int { return strings.Compare(args[i].Key, args[j].Key) })
	}
	return rounds
}

// claimRound is one statement of ClaimBatch: the entries idx of args, in
// key order, the tokens drawn for them, and the longest result it reads.
type claimRound struct {
	idx       []int
	tokens    []int64
	maxResult int
	params    []any
}

func newClaimRound(args []storage.ClaimArgs, idx []int, maxResult int) claimRound {
	n := len(idx)
	keys, fps := make(refArray[bytesRef], n), make(refArray[bytesRef], n)
	leases, retentions := make(refArray[intervalRef], n), make(refArray[intervalRef], n)
	caps := make([]int32, n)
	for j, i := range idx {
		a := args[i]
		keys[j], fps[j] = bytesRef(a.Key), bytesRef(fingerprint(a))
		leases[j], retentions[j] = intervalRef(micros(a.Lease)), intervalRef(micros(a.Retention))
		caps[j] = maxAttempts(a.MaxAttempts)
	}
	tokens := randomTokens(n)
	return claimRound{idx: idx, tokens: tokens, maxResult: maxResult,
		params: []any{keys, fps, leases, retentions, tokens, caps, tooManyAttempts, int32(maxResult)}}
}

// refArray is an array parameter that pgx encodes without reflection and
// without an allocation per element. pgx boxes each element of a [][]byte
// or a []time.Duration into a new interface value, an allocation; a
// refArray hands pgx pointers to its elements, which an interface holds
// as they are.
type refArray[T any] []T

func (a refArray[T]) Dimensions() []pgtype.ArrayDimension {
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

func (a refArray[T]) Index(i int) any { return &a[i] }
func (a refArray[T]) IndexType() any  { return (*T)(nil) }

// bytesRef is a bytea element of a refArray.
type bytesRef []byte

func (b *bytesRef) BytesValue() ([]byte, error) { return *b, nil }

// intervalRef is an interval element of a refArray, whole microseconds.
type intervalRef time.Duration

func (d *intervalRef) IntervalValue() (pgtype.Interval, error) {
	return pgtype.Interval{Microseconds: time.Duration(*d).Microseconds(), Valid: true}, nil
}

// randomTokens returns n random tokens, none of them 0.
func randomTokens(n int) []int64 {
	b := make([]byte, 8*n)
	rand.Read(b) // never fails (crypto/rand)
	tokens := make([]int64, n)
	for j := range tokens {
		tokens[j] = int64(binary.LittleEndian.Uint64(b[8*j:]))
		for tokens[j] == 0 { // once in 2⁶⁴ draws
			rand.Read(b[8*j : 8*j+8])
			tokens[j] = int64(binary.LittleEndian.Uint64(b[8*j:]))
		}
	}
	return tokens
}

// scan reads the round's rows into out and closes rows. The statement
// returns one row per entry, in no particular order: each is placed by its
// key, which the round's sorted keys find by binary search.
func (r claimRound) scan(rows pgx.Rows, args []storage.ClaimArgs, out []storage.Claim) error {
	defer rows.Close()
	answered := make([]bool, len(r.idx))
	n := 0
	// One row and one destination list for all rows: a row per entry
	// would be an allocation per key. key and fp are the driver's bytes,
	// valid until the next row: they are compared only.
	var key, fp pgtype.DriverBytes
	var row claimRow
	dest := []any{&key, &row.status, &row.token, &row.attempt, &fp, &row.leaseUntil, &row.result, &row.resultSize, &row.expiresAt}
	for rows.Next() {
		row = claimRow{}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		j, ok := slices.BinarySearchFunc(r.idx, key, func(i int, key pgtype.DriverBytes) int {
			switch k := args[i].Key; { // string(key) in a comparison is not a copy
			case k < string(key):
				return -1
			case k > string(key):
				return 1
			}
			return 0
		})
		if !ok || answered[j] {
			return errors.New("claim batch answered an entry it was not asked, or twice")
		}
		answered[j] = true
		a := args[r.idx[j]]
		row.acquired = row.token == r.tokens[j]
		row.sameFingerprint = bytes.Equal(fp, fingerprint(a))
		// Every error of a row is its entry's: the statement has claimed
		// the other entries, whose callers must hear of it.
		c, err := row.cappedClaim(a, r.maxResult)
		c.Err = err
		out[r.idx[j]] = c
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n != len(r.idx) {
		return errors.New("claim batch answered fewer entries than asked")
	}
	return nil
}

// CompleteBatch implements [storage.Store.CompleteBatch] with one UPDATE over
// unnest(…) arrays, the rows locked in key order. A value over
// Config.MaxValueSize fails the whole batch with a *storage.ValueTooLargeError
// before anything is sent. An entry whose key and
// token repeat an earlier entry's gets storage.ErrLeaseLost, as a second
// Complete would: the first one either completed the record or found the
// token not current.
func (s *Store) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	errs := make([]error, len(cs))
	if len(cs) == 0 {
		return errs, nil
	}
	idx := make([]int, 0, len(cs))
	for i, c := range cs {
		if c.Retention <= 0 {
			return nil, errors.New("pgstore: CompleteBatch: retention must be positive")
		}
		if len(c.Value) > s.cfg.MaxValueSize {
			return nil, &storage.ValueTooLargeError{Store: "pgstore", Size: len(c.Value), Max: s.cfg.MaxValueSize}
		}
		errs[i] = storage.ErrLeaseLost // until its row comes back
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
