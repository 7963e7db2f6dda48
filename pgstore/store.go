package pgstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem/internal/scanpage"
	"github.com/idemgo/idem/storage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// DB is what a [Store] runs its statements on. *pgxpool.Pool, *pgx.Conn
// and pgx.Tx all satisfy it: with a pool every call is its own transaction;
// with a pgx.Tx the calls join the caller's transaction and commit or roll
// back with it. A *pgx.Conn is not safe for concurrent use, and neither is a
// Store over one.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Config configures a [Store]. The zero value means every default.
type Config struct {
	// Table is the records table, created by [Migrate]: a name, or
	// schema.name, as written in SQL. Each part is either unquoted, of
	// lowercase ASCII letters, digits and underscores, not starting with a
	// digit, or in double quotes (any other name: "Records"), at most 48
	// bytes; it is always quoted in SQL, so reserved words are fine.
	// Default [DefaultTable], found through the connection's search_path.
	Table string

	// MaxValueSize is the longest value (Complete, CompleteBatch) or
	// encoded cause (Fail) accepted, in bytes; a longer one gets a
	// *storage.ValueTooLargeError and nothing is written. It also bounds what is
	// read: a record holding a longer result (written by another program,
	// or by a Store with a larger MaxValueSize) is refused by Claim,
	// ClaimBatch and Get with a *storage.ValueTooLargeError, and the server does
	// not send it. Default 1 MiB; at most MaxValueSizeLimit.
	MaxValueSize int

	// Peek is when Claim first reads the key's row with a plain SELECT,
	// which answers a duplicate, a busy key or another fingerprint for the
	// least a read costs, and leaves the claim statement to the keys it
	// does not answer (a new key, a takeover), one more statement and
	// round trip for them. Without a peek, the claim statement reads and
	// writes in one: a new key's fastest path, while a duplicate costs the
	// server the planning and setup of a statement that may insert, several
	// times what a plain SELECT costs. Both write nothing and lock nothing
	// for a claim answered from the row, and answer alike. Default PeekAuto.
	Peek Peek
}

// Peek is when a [Store]'s Claim reads the key before it claims it: see
// Config.Peek.
type Peek uint8

// The values of [Peek].
const (
	// PeekAuto peeks while most of the Store's recent claims were
	// answered from the row, as in a storm of retries or redeliveries,
	// and claims in one statement while most wrote. It starts without.
	PeekAuto Peek = iota
	// PeekAlways peeks before every claim: for stores that answer
	// duplicates far more often than they see new keys.
	PeekAlways
	// PeekNever never peeks: one statement and one round trip for every
	// claim.
	PeekNever
)

// Defaults and limits of [Config].
const (
	DefaultMaxValueSize = 1 << 20
	MaxValueSizeLimit   = 256 << 20
)

// Store is an [storage.Store] over PostgreSQL. Every method is one SQL
// statement, atomic on its own, in one round trip; ClaimBatch and
// CompleteBatch too. Time is the server's statement_timestamp(): the start
// of the statement, the same for every row it touches, and not frozen
// inside a long transaction as now() is. Tokens come from a sequence, so no
// token is ever issued twice for a key, not even after its record expired.
//
// Expired records stay in the table, invisible to every method, until
// [Store.Reap] or a [Reaper] deletes them or a Claim of the key replaces
// them.
type Store struct {
	db   DB
	cfg  Config
	t    table
	q    queries
	lean lean // of recent claims, under PeekAuto

	limitArg any // int32(cfg.MaxValueSize), boxed once
}

// lean is the balance of a Store's recent claims: up by one for a claim
// answered from the row as it was (a duplicate, a busy key, another
// fingerprint), down by one for a claim that wrote (a new key, a takeover),
// within ±leanLimit. Under PeekAuto a Claim peeks while it is positive.
// Concurrent claims may lose a step to each other (one compare-and-swap,
// no retry): the balance is a statistic, and at its bounds it is only
// read, so a steady workload writes no shared memory.
type lean struct{ n atomic.Int32 }

const leanLimit = 16

func (l *lean) note(read bool) {
	switch n := l.n.Load(); {
	case read && n < leanLimit:
		l.n.CompareAndSwap(n, n+1)
	case !read && n > -leanLimit:
		l.n.CompareAndSwap(n, n-1)
	}
}

// noteClaim counts a claim in the balance PeekAuto follows: read when the
// row answered it. Under PeekAlways and PeekNever there is no balance to
// keep.
func (s *Store) noteClaim(read bool) {
	if s.cfg.Peek == PeekAuto {
		s.lean.note(read)
	}
}

// peeks reports whether the next Claim reads first (Config.Peek).
func (s *Store) peeks() bool {
	switch s.cfg.Peek {
	case PeekAlways:
		return true
	case PeekNever:
		return false
	}
	return s.lean.n.Load() > 0
}

var (
	_ storage.Store   = (*Store)(nil)
	_ storage.Scanner = (*Store)(nil)
)

// New returns a Store over db. It fails when db is nil or a field of cfg is
// out of range (cfg.Table not a valid name); the error names the field. It
// does not touch the database (run [Migrate] once first).
func New(db DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("pgstore: New: db is nil")
	}
	t, err := parseTable(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("pgstore: Config.Table: %w", err)
	}
	if cfg.MaxValueSize < 0 || cfg.MaxValueSize > MaxValueSizeLimit {
		return nil, fmt.Errorf("pgstore: Config.MaxValueSize %d: must be between 1 and %d", cfg.MaxValueSize, MaxValueSizeLimit)
	}
	if cfg.Peek > PeekNever {
		return nil, fmt.Errorf("pgstore: Config.Peek %d: not a Peek", cfg.Peek)
	}
	cfg.Table = t.name
	cfg.MaxValueSize = cmp.Or(cfg.MaxValueSize, DefaultMaxValueSize)
	q := newQueries(t)
	q.claimPeek = t.claimPeek(cfg.MaxValueSize)
	return &Store{db: db, cfg: cfg, t: t, q: q, limitArg: int32(cfg.MaxValueSize)}, nil
}

// MaxValueSize returns Config.MaxValueSize: the longest value or cause, in
// bytes, that Complete, Fail and CompleteBatch write, and the longest
// result that Claim, ClaimBatch and Get read back. It implements idem's
// ValueLimiter, so that a caller can keep its values within it.
func (s *Store) MaxValueSize() int { return s.cfg.MaxValueSize }

// Table returns the records table's quoted, possibly schema-qualified name,
// for use in SQL of one's own.
func (s *Store) Table() string { return s.t.ident }

// The status column's values.
const (
	statusInProgress = int16(storage.StatusInProgress)
	statusCompleted  = int16(storage.StatusCompleted)
	statusFailed     = int16(storage.StatusFailed)
)

// micros rounds d up to whole microseconds, the resolution of PostgreSQL's
// interval, so that a positive duration stays positive.
func micros(d time.Duration) time.Duration {
	if r := d % time.Microsecond; r > 0 {
		d += time.Microsecond - r
	}
	return d
}

// maxAttempts is the claim's cap as the int parameter: 0 for none.
func maxAttempts(n int) int32 {
	return int32(max(0, min(n, math.MaxInt32)))
}

func validClaim(op string, a storage.ClaimArgs) error {
	switch {
	case a.Lease <= 0:
		return fmt.Errorf("pgstore: %s: lease %v must be positive", op, a.Lease)
	case a.Retention <= 0:
		return fmt.Errorf("pgstore: %s: retention %v must be positive", op, a.Retention)
	}
	return nil
}

// fingerprint is a's fingerprint as a parameter: never NULL, which would
// compare equal to nothing.
func fingerprint(a storage.ClaimArgs) []byte {
	if a.Fingerprint == nil {
		return []byte{}
	}
	return a.Fingerprint
}

// tooManyAttempts is the cause a capped claim stores.
var tooManyAttempts = storage.TooManyAttemptsCause()

// Claim implements [storage.Store.Claim] in one statement and one round trip,
// which reads the key's row first and writes only to change it: a new key
// is inserted; a takeover after a crash (an expired record, a released
// one, a lease that ran out) or a claim over the attempt cap updates the
// row. A duplicate, a busy key or another fingerprint is answered from the
// read, with no write and no row lock: no transaction ID, no commit to
// wait for. While most recent claims were answered so (Config.Peek), a
// claim first reads the row with a plain SELECT, which answers them at the
// cost of a read, and sends the claim statement only when the read does
// not answer. Of concurrent claims of a key, PostgreSQL's unique index lets
// one insert and makes the others wait for it; a claim whose write found
// the row changed since its read runs again, with a new snapshot, and
// after readFirstTries such runs (claims racing on the key all along) the
// full claim answers from the row it locks. A Busy answer's record carries
// no token: the holder's is the holder's alone.
// It returns storage.ErrKeyReused for a fingerprint mismatch, a
// *storage.ValueTooLargeError for a stored result longer than Config.MaxValueSize,
// and an error wrapping storage.ErrStoreUnavailable when the server cannot be
// reached.
func (s *Store) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if err := validClaim("Claim", a); err != nil {
		return storage.Claim{}, err
	}
	limit := s.limitArg
	key, fp := []byte(a.Key), fingerprint(a)
	sc := claimScans.Get().(*claimScan)
	defer sc.put()
	r, dest := &sc.row, sc.dest
	if s.peeks() {
		found, err := sc.peek(ctx, s.db, s.q.claimPeek, key, fp)
		if err != nil {
			return storage.Claim{}, translate("claim", err)
		}
		if found {
			s.noteClaim(true)
			return r.claim(a)
		}
	}
	args := []any{key, fp, micros(a.Lease), micros(a.Retention), maxAttempts(a.MaxAttempts), limit}
	for range readFirstTries {
		err := s.db.QueryRow(ctx, s.q.claimRead, args...).Scan(dest...)
		if err == nil && r.status == statusCapped {
			break // the full claim stores the cap
		}
		if err == nil {
			s.noteClaim(!r.acquired)
			return r.cappedClaim(a, s.cfg.MaxValueSize)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return storage.Claim{}, translate("claim", err)
		}
	}
	args = append(args[:5], tooManyAttempts, limit)
	if err := s.db.QueryRow(ctx, s.q.claim, args...).Scan(dest...); err != nil {
		return storage.Claim{}, translate("claim", err)
	}
	s.noteClaim(!r.acquired)
	return r.cappedClaim(a, s.cfg.MaxValueSize)
}

// statusCapped is the status read_first_claim answers for a takeover over
// the attempt cap: no record has it, and the full claim follows at once.
const statusCapped = 0

// readFirstTries is how many times a claim runs the statement that reads
// first (read_first_claim in queries.sql) before the full claim, at least
// 1. Each run that returns no row means that another claim wrote the
// key's row between that run's read and its write. A variable for the
// tests, which set it to 1 to make the full claim answer every race.
var readFirstTries = 3

// claimScan is a claimRow with the scan destinations of its columns, kept
// in a pool: a claim that reads a duplicate allocates little more than
// what it returns.
type claimScan struct {
	row      claimRow
	dest     []any
	fp       pgtype.DriverBytes // the peek's fingerprint, read in place
	peekDest []any
}

var claimScans = sync.Pool{New: func() any {
	sc := new(claimScan)
	r := &sc.row
	sc.dest = []any{&r.status, &r.token, &r.attempt, &r.sameFingerprint, &r.leaseUntil, &r.result, &r.resultSize, &r.expiresAt, &r.acquired}
	sc.peekDest = []any{&r.status, &r.token, &r.attempt, &sc.fp, &r.leaseUntil, &r.result, &r.expiresAt}
	return sc
}}

// peek runs the peek (claim_peek in queries.sql) of key with fingerprint
// fp, and reports whether it found a row that answers the claim; sc.row
// holds it then. The row's columns are plain: the fingerprint is compared
// here, read where the driver holds it, and a result over the Store's
// limit leaves the row out (the claim statement answers it).
func (sc *claimScan) peek(ctx context.Context, db DB, sql string, key, fp []byte) (bool, error) {
	rows, err := db.Query(ctx, sql, key, fp)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return false, rows.Err()
	}
	if err := rows.Scan(sc.peekDest...); err != nil {
		return false, err
	}
	r := &sc.row
	r.sameFingerprint = bytes.Equal(sc.fp, fp)
	r.resultSize, r.acquired = pgtype.Int4{}, false
	sc.fp = nil // the driver's memory, valid until Close
	rows.Close()
	return true, rows.Err()
}

// put returns sc to the pool, without the result the claim returned or
// the driver's memory a failed peek may have left: a scan writes every
// column it reads, and the peek sets the rest, so nothing else of the last
// row survives the next.
func (sc *claimScan) put() {
	sc.row.result, sc.fp = nil, nil
	claimScans.Put(sc)
}

// claimRow is the row a claim statement returns.
type claimRow struct {
	status          int16
	token           int64
	attempt         int32
	sameFingerprint bool
	leaseUntil      pgtype.Timestamptz
	result          []byte
	resultSize      pgtype.Int4 // the stored result's length, when the statement returns it
	expiresAt       time.Time
	acquired        bool
}

// cappedClaim is claim for a row whose result a statement of the Store
// left out when it is longer than limit.
func (r *claimRow) cappedClaim(a storage.ClaimArgs, limit int) (storage.Claim, error) {
	c, err := r.claim(a)
	if err == nil && r.resultSize.Valid && int(r.resultSize.Int32) > limit {
		// A copy of the key: Claim's may be lent (see storage.Store).
		return storage.Claim{}, &storage.ValueTooLargeError{Store: "pgstore", Size: int(r.resultSize.Int32), Max: limit, Key: strings.Clone(a.Key), Stored: true}
	}
	return c, err
}

func (r *claimRow) claim(a storage.ClaimArgs) (storage.Claim, error) {
	if !r.acquired && !r.sameFingerprint {
		return storage.Claim{}, storage.ErrKeyReused
	}
	rec := storage.Record{
		Key:         a.Key,
		Status:      storage.Status(r.status),
		Token:       storage.Token(r.token),
		Attempt:     int(r.attempt),
		Fingerprint: a.Fingerprint,
		Result:      r.result,
		ExpiresAt:   r.expiresAt,
	}
	if r.leaseUntil.Valid {
		rec.LeaseUntil = r.leaseUntil.Time
	}
	switch {
	case r.acquired:
		return storage.Claim{Outcome: storage.Acquired, Token: rec.Token, Record: rec}, nil
	case rec.Status.Done():
		return storage.Claim{Outcome: storage.Duplicate, Record: rec}, nil
	case rec.Status == storage.StatusInProgress:
		rec.Token = 0 // the holder's token is the holder's alone: it would complete or release its lease
		return storage.Claim{Outcome: storage.Busy, Record: rec}, nil
	}
	return storage.Claim{}, fmt.Errorf("pgstore: claim: the record of key %q has status %d", a.Key, r.status)
}

// Complete implements [storage.Store.Complete] with one fenced UPDATE: no row
// matched means the token is not current, storage.ErrLeaseLost. A value over
// Config.MaxValueSize gets a *storage.ValueTooLargeError and is not sent. The record
// expires retention from now, or keeps the expiry its claim set when that
// is no earlier and at most the rest of the lease later, so that the
// UPDATE touches no indexed column (see keptExpiry).
func (s *Store) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	return s.finish(ctx, "complete", key, t, statusCompleted, value, retention)
}

// Fail implements [storage.Store.Fail] like Complete, storing cause.
func (s *Store) Fail(ctx context.Context, key string, t storage.Token, cause []byte, retention time.Duration) error {
	return s.finish(ctx, "fail", key, t, statusFailed, cause, retention)
}

func (s *Store) finish(ctx context.Context, op, key string, t storage.Token, status int16, result []byte, retention time.Duration) error {
	if retention <= 0 {
		return fmt.Errorf("pgstore: %s: retention %v must be positive", op, retention)
	}
	if len(result) > s.cfg.MaxValueSize {
		return &storage.ValueTooLargeError{Store: "pgstore", Size: len(result), Max: s.cfg.MaxValueSize}
	}
	return s.fenced(ctx, op, t, s.q.finish, []byte(key), int64(t), status, result, micros(retention))
}

// Release implements [storage.Store.Release]: the token becomes 0 and the
// lease ends now, so the next Claim takes over at once. storage.ErrLeaseLost
// as for Complete.
func (s *Store) Release(ctx context.Context, key string, t storage.Token) error {
	return s.fenced(ctx, "release", t, s.q.release, []byte(key), int64(t))
}

// Extend implements [storage.Store.Extend]: the lease ends lease after the
// server's statement time, and the record is kept at least the claim's
// retention after that. storage.ErrLeaseLost as for Complete.
func (s *Store) Extend(ctx context.Context, key string, t storage.Token, lease time.Duration) error {
	if lease <= 0 {
		return fmt.Errorf("pgstore: extend: lease %v must be positive", lease)
	}
	return s.fenced(ctx, "extend", t, s.q.extend, []byte(key), int64(t), micros(lease))
}

// fenced runs a holder's UPDATE; no row updated is storage.ErrLeaseLost.
func (s *Store) fenced(ctx context.Context, op string, t storage.Token, sql string, args ...any) error {
	if t == 0 { // no claim has token 0; a released record does
		return storage.ErrLeaseLost
	}
	tag, err := s.db.Exec(ctx, sql, args...)
	if err != nil {
		return translate(op, err)
	}
	if tag.RowsAffected() == 0 {
		return storage.ErrLeaseLost
	}
	return nil
}

// Get implements [storage.Store.Get]: storage.ErrNotFound for a key with no
// record or an expired one, a *storage.ValueTooLargeError for a stored result
// longer than Config.MaxValueSize. LeaseUntil is zero on an outcome.
func (s *Store) Get(ctx context.Context, key string) (storage.Record, error) {
	rec := storage.Record{Key: key}
	var status int16
	var token int64
	var attempt int32
	var leaseUntil pgtype.Timestamptz
	var resultSize pgtype.Int4
	err := s.db.QueryRow(ctx, s.q.get, []byte(key), int32(s.cfg.MaxValueSize)).
		Scan(&status, &token, &attempt, &rec.Fingerprint, &leaseUntil, &rec.Result, &resultSize, &rec.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.Record{}, storage.ErrNotFound
	}
	if err != nil {
		return storage.Record{}, translate("get", err)
	}
	if resultSize.Valid && int(resultSize.Int32) > s.cfg.MaxValueSize {
		return storage.Record{}, &storage.ValueTooLargeError{Store: "pgstore", Size: int(resultSize.Int32), Max: s.cfg.MaxValueSize, Key: key, Stored: true}
	}
	rec.Status, rec.Token, rec.Attempt = storage.Status(status), storage.Token(token), int(attempt)
	if leaseUntil.Valid {
		rec.LeaseUntil = leaseUntil.Time
	}
	return rec, nil
}

// scanPage is how many records a Scan reads per statement.
const scanPage = 500

// Scan implements [storage.Scanner] with one statement per page of scanPage
// records, in key order from prefix, each page its own snapshot. A record
// holding a result longer than Config.MaxValueSize is listed without it.
func (s *Store) Scan(ctx context.Context, prefix string, fn func(storage.Record) bool) error {
	return scanpage.Scan(ctx, prefix, scanPage, s.scanPage, fn)
}

// scanPage reads one page of Scan.
func (s *Store) scanPage(ctx context.Context, from []byte, inclusive bool) ([]storage.Record, error) {
	rows, err := s.db.Query(ctx, s.q.scan, from, int32(s.cfg.MaxValueSize), inclusive, int32(scanPage))
	if err != nil {
		return nil, translate("scan", err)
	}
	defer rows.Close()
	var recs []storage.Record
	for rows.Next() {
		var key []byte
		var status int16
		var token int64
		var attempt int32
		var leaseUntil pgtype.Timestamptz
		var resultSize pgtype.Int4
		var rec storage.Record
		if err := rows.Scan(&key, &status, &token, &attempt, &rec.Fingerprint, &leaseUntil, &rec.Result, &resultSize, &rec.ExpiresAt); err != nil {
			return nil, translate("scan", err)
		}
		rec.Key, rec.Status, rec.Token, rec.Attempt = string(key), storage.Status(status), storage.Token(token), int(attempt)
		if leaseUntil.Valid {
			rec.LeaseUntil = leaseUntil.Time
		}
		recs = append(recs, rec)
	}
	return recs, translate("scan", rows.Err())
}

// Delete implements [storage.Store.Delete]; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	_, err := s.db.Exec(ctx, s.q.delete, []byte(key))
	return translate("delete", err)
}

// DeleteIf implements [storage.Store.DeleteIf] with one DELETE conditioned
// on the status and token, on the server's clock. Errors:
// storage.ErrChanged; storage.ErrNotFound; others as for Get.
func (s *Store) DeleteIf(ctx context.Context, key string, status storage.Status, t storage.Token) error {
	var deleted, live bool
	err := s.db.QueryRow(ctx, s.q.deleteIf, []byte(key), int16(status), int64(t)).Scan(&deleted, &live)
	switch {
	case err != nil:
		return translate("delete_if", err)
	case deleted:
		return nil
	case live:
		return storage.ErrChanged
	}
	return storage.ErrNotFound
}
