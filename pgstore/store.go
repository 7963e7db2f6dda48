package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/idemgo/idem"
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
	// schema.name. Each part is lowercase ASCII letters, digits and
	// underscores, not starting with a digit, at most 48 bytes; it is
	// quoted in SQL, so reserved words are fine. Default [DefaultTable],
	// found through the connection's search_path.
	Table string

	// MaxValueSize is the longest value (Complete, CompleteBatch) or
	// encoded cause (Fail) accepted, in bytes; a longer one gets a
	// *ValueTooLargeError and nothing is written. It also bounds what is
	// read: a record holding a longer result (written by another program,
	// or by a Store with a larger MaxValueSize) is refused by Claim,
	// ClaimBatch and Get with a *ValueTooLargeError, and the server does
	// not send it. Default 1 MiB; at most MaxValueSizeLimit.
	MaxValueSize int
}

// Defaults and limits of [Config].
const (
	DefaultMaxValueSize = 1 << 20
	MaxValueSizeLimit   = 256 << 20
)

// Store is an [idem.Store] over PostgreSQL. Every method is one SQL
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
	db  DB
	cfg Config
	t   table
	q   queries
}

var (
	_ idem.Store          = (*Store)(nil)
	_ idem.BatchClaimer   = (*Store)(nil)
	_ idem.BatchCompleter = (*Store)(nil)
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
	cfg.Table = t.name
	cfg.MaxValueSize = cmp.Or(cfg.MaxValueSize, DefaultMaxValueSize)
	return &Store{db: db, cfg: cfg, t: t, q: newQueries(t)}, nil
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
	statusInProgress = int16(idem.StatusInProgress)
	statusCompleted  = int16(idem.StatusCompleted)
	statusFailed     = int16(idem.StatusFailed)
)

// claimUpdate is the ON CONFLICT branch shared by the claim statements. A
// claim that finds a record always rewrites it, so that RETURNING yields the
// row as it is under the row lock, whatever happened: every outcome in one
// statement. Each column is rewritten with its own value unless the branch
// changes it:
//
//	new   the record expired: replaced as if absent (attempt 1)
//	keep  fingerprint differs (ErrKeyReused, checked first in every
//	      status), an outcome (Duplicate), or a live lease (Busy)
//	cap   lease over, attempts exhausted: Failed(ErrTooManyAttempts)
//	take  lease over or released: a new token, attempt+1
//
// The unchanged rewrite of "keep" touches no indexed column, so it is a
// HOT update: no index entry, the result's TOAST shared. OFFSET 0 keeps
// the branch a subquery computed once, instead of inlined into each of the
// eight CASEs (which made every execution's setup several times heavier).
// {max_attempts} is the claim's cap, NULL for none, and {cause} the
// parameter of the cause stored when capped (see onConflict).
const claimUpdate = `ON CONFLICT (key) DO UPDATE SET
		(status, token, attempt, fingerprint, lease_until, retention, result, expires_at) = (
		SELECT
			CASE b.branch WHEN 'keep' THEN r.status WHEN 'cap' THEN 3 ELSE 1 END,
			CASE b.branch WHEN 'keep' THEN r.token WHEN 'cap' THEN 0 ELSE excluded.token END,
			CASE b.branch WHEN 'new' THEN 1 WHEN 'take' THEN r.attempt + 1 ELSE r.attempt END,
			CASE b.branch WHEN 'new' THEN excluded.fingerprint ELSE r.fingerprint END,
			CASE b.branch WHEN 'keep' THEN r.lease_until WHEN 'cap' THEN NULL ELSE excluded.lease_until END,
			CASE b.branch WHEN 'keep' THEN r.retention ELSE excluded.retention END,
			CASE b.branch WHEN 'keep' THEN r.result WHEN 'cap' THEN {cause} ELSE NULL END,
			CASE b.branch WHEN 'keep' THEN r.expires_at
				WHEN 'cap' THEN statement_timestamp() + excluded.retention
				ELSE excluded.expires_at END
		FROM (SELECT CASE
			WHEN r.expires_at <= statement_timestamp() THEN 'new'
			WHEN r.fingerprint <> excluded.fingerprint OR r.status <> 1 THEN 'keep'
			WHEN r.token <> 0 AND r.lease_until > statement_timestamp() THEN 'keep'
			WHEN r.attempt >= {max_attempts} THEN 'cap'
			ELSE 'take' END AS branch OFFSET 0) b)`

// queries are the statements of a Store, with the table's names in.
type queries struct {
	claimNew, claimTake, claim, claimBatch string
	finish, release, extend, get, delete   string
	txClaimNew, txClaim                    string
	txComplete, txFail                     string
	completeBatch, reap                    string
}

func newQueries(t table) queries {
	q := queries{
		// TxGuard's claim of a key without a record, the usual case: the
		// plain INSERT, cheaper for the server than the full claim. It
		// returns no row when the key has a record (or a concurrent
		// claim's insert committed first), and the full claim runs then.
		// Its parameters are the full claim's first four.
		claimNew: t.expand(`INSERT INTO {table} AS r
			(key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
		VALUES ($1::bytea, 1, nextval('{seq}'), 1, $2::bytea, statement_timestamp() + $3::interval, $4::interval, NULL,
			statement_timestamp() + $3::interval + $4::interval)
		ON CONFLICT (key) DO NOTHING
		RETURNING r.token, r.lease_until, r.expires_at`),

		// Store.Claim's statement: the insert of a new key, or the takeover
		// of an expired record, a released one or one whose lease ran out
		// (under the attempt cap), as the full claim below would decide,
		// with a DO UPDATE that is only that takeover. It returns the row
		// when it acquired the key, and no row when the key is someone
		// else's (a duplicate, a busy key, another fingerprint, the cap):
		// the full claim runs then. PostgreSQL sets up a DO UPDATE's
		// expressions on every execution, taken or not, and the full
		// claim's CASEs cost more than the insert itself; this one's are
		// few. Its parameters are the full claim's first five.
		claimTake: t.expand(`INSERT INTO {table} AS r
			(key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
		VALUES ($1::bytea, 1, nextval('{seq}'), 1, $2::bytea, statement_timestamp() + $3::interval, $4::interval, NULL,
			statement_timestamp() + $3::interval + $4::interval)
		ON CONFLICT (key) DO UPDATE SET status = 1, token = excluded.token,
			attempt = CASE WHEN r.expires_at <= statement_timestamp() THEN 1 ELSE r.attempt + 1 END,
			fingerprint = excluded.fingerprint, lease_until = excluded.lease_until, retention = excluded.retention,
			result = NULL, expires_at = excluded.expires_at
		WHERE r.expires_at <= statement_timestamp()
			OR (r.status = 1 AND r.fingerprint = excluded.fingerprint
				AND (r.token = 0 OR r.lease_until <= statement_timestamp())
				AND (NULLIF($5::int, 0) IS NULL OR r.attempt < $5::int))
		RETURNING r.token, r.attempt, r.lease_until, r.expires_at`),

		// $1 key, $2 fingerprint, $3 lease, $4 retention, $5 max attempts
		// (0: no cap), $6 the cause stored when capped, $7 the longest
		// result returned (see cappedResult). The new token is drawn once,
		// for the proposed row; currval reads it back, so acquired says the
		// row holds this statement's token.
		claim: t.expand(fullClaim(cappedResult("$7::int"))),

		// Arrays of one round of ClaimBatch, keys distinct and sorted, with
		// the tokens the client drew for them: $1 keys, $2 fingerprints, $3
		// leases, $4 retentions, $5 tokens, $6 max attempts (0: no cap), $7
		// the cause stored when capped; $8 the longest result returned. The plan is a scan of unnest under
		// the insert, with nothing to reorder it: rows are inserted (and
		// locked) in the arrays' order, which is key order, so two batches
		// lock the rows they share in the same order and never deadlock.
		// Every row comes back, inserted or updated, in that order; the
		// client tells the keys it acquired by their tokens. No CTE, join
		// or sort: each cost the server more per key than the insert's
		// own work.
		claimBatch: t.expand(`INSERT INTO {table} AS r
			(key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
		SELECT a.key, 1, a.token, 1, a.fingerprint, statement_timestamp() + a.lease, a.retention, NULL,
			statement_timestamp() + a.lease + a.retention
		FROM unnest($1::bytea[], $2::bytea[], $3::interval[], $4::interval[], $5::bigint[])
			AS a(key, fingerprint, lease, retention, token)
		` + onConflict("(SELECT NULLIF(c.max_attempts, 0) FROM unnest($1::bytea[], $6::int[]) AS c(key, max_attempts) WHERE c.key = excluded.key)",
			"$7::bytea") + `
		RETURNING r.key, r.status, r.token, r.attempt, r.fingerprint, r.lease_until, ` + cappedResult("$8::int") + `,
			r.expires_at`),

		// The fencing condition of every holder's call: the claim's token
		// is current (never 0: the caller checks), the record in progress
		// and not expired. A lease that ran out does not matter: the token
		// stays current until someone takes over.
		//
		// $1 key, $2 token, $3 status, $4 result, $5 retention.
		finish: t.expand(`UPDATE {table} SET status = $3::smallint, result = $4::bytea, lease_until = NULL,
			expires_at = ` + keptExpiry("$5::interval") + `
		WHERE key = $1::bytea AND token = $2::bigint AND status = 1 AND expires_at > statement_timestamp()`),
		// TxGuard's outcomes, $1 key, $2 token, $3 value or cause, $4
		// retention: the fenced UPDATE, which raises an error when it
		// matches no row, so that the transaction aborts and the COMMIT
		// pipelined after it rolls back: fn's writes never commit without
		// their outcome. count(*) is not a constant, so the cast is not
		// folded at planning: it fails only when it runs, on no row. The
		// row has been locked by this transaction since its claim, so
		// whether it expired since does not matter. A complete keeps
		// expires_at when it is late enough already (see TxConfig.Lease).
		txComplete: txOutcome(t, "2", "greatest(expires_at, statement_timestamp() + $4::interval)"),
		txFail:     txOutcome(t, "3", "statement_timestamp() + $4::interval"),

		// The lease ends now and no token is current: the next claim takes
		// over at once.
		release: t.expand(`UPDATE {table} SET token = 0, lease_until = statement_timestamp()
		WHERE key = $1::bytea AND token = $2::bigint AND status = 1 AND expires_at > statement_timestamp()`),
		// The record stays at least the claim's retention after the new
		// lease end.
		extend: t.expand(`UPDATE {table} SET lease_until = statement_timestamp() + $3::interval,
			expires_at = greatest(expires_at, statement_timestamp() + $3::interval + retention)
		WHERE key = $1::bytea AND token = $2::bigint AND status = 1 AND expires_at > statement_timestamp()`),
		get: t.expand(`SELECT status, token, attempt, fingerprint, lease_until, ` + cappedResult("$2::int") + `, expires_at
		FROM {table} AS r WHERE key = $1::bytea AND expires_at > statement_timestamp()`),
		delete: t.expand(`DELETE FROM {table} WHERE key = $1::bytea`),

		// The rows are locked in key order first, by a SELECT … ORDER BY
		// … FOR UPDATE (which locks the rows as the sort hands them out),
		// so two batches that share rows lock them in the same order and
		// never deadlock; the UPDATE's own join may visit the rows in any
		// order the planner likes. Key and token pairs are distinct.
		completeBatch: t.expand(`WITH c AS (
		SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bytea[], $4::interval[])
			WITH ORDINALITY AS c(key, token, value, retention, i)),
	locked AS MATERIALIZED (
		SELECT r.key FROM {table} AS r JOIN c ON r.key = c.key AND r.token = c.token
		ORDER BY r.key FOR UPDATE OF r)
	UPDATE {table} AS r SET status = 2, result = c.value, lease_until = NULL,
			expires_at = ` + keptExpiry("c.retention") + `
		FROM c
		WHERE r.key = c.key AND r.token = c.token AND r.key IN (SELECT key FROM locked)
			AND r.status = 1 AND r.expires_at > statement_timestamp()
		RETURNING c.i`),

		// Rows locked by a claim or a holder's call in flight are skipped:
		// the reaper never waits, and never deletes a record a claim just
		// renewed (the locked row is re-checked against the condition).
		reap: t.expand(`DELETE FROM {table} WHERE key IN (
			SELECT key FROM {table} WHERE expires_at <= statement_timestamp()
			ORDER BY expires_at LIMIT $1::int FOR UPDATE SKIP LOCKED)
		AND expires_at <= statement_timestamp()`),
	}
	q.txClaimNew, q.txClaim = q.claimNew+restoreLockTimeout, t.expand(fullClaim("r.result"))+restoreLockTimeout
	return q
}

// fullClaim is the full claim statement (see queries.claim), returning the
// record's result as the expression result.
func fullClaim(result string) string {
	return `INSERT INTO {table} AS r
			(key, status, token, attempt, fingerprint, lease_until, retention, result, expires_at)
		VALUES ($1::bytea, 1, nextval('{seq}'), 1, $2::bytea, statement_timestamp() + $3::interval, $4::interval, NULL,
			statement_timestamp() + $3::interval + $4::interval)
		` + onConflict("NULLIF($5::int, 0)", "$6::bytea") + `
		RETURNING r.status, r.token, r.attempt, r.fingerprint = $2::bytea, r.lease_until, ` + result + `, r.expires_at,
			r.token = currval('{seq}')`
}

// cappedResult returns a Store's columns for the result of the record r:
// the result, NULL when it is longer than limit (a parameter), and its
// length. The server never sends a result the Store refuses to read.
func cappedResult(limit string) string {
	return `CASE WHEN octet_length(r.result) <= ` + limit + ` THEN r.result END, octet_length(r.result)`
}

// txOutcome is the statement storing a TxGuard outcome of status, and
// expires_at.
func txOutcome(t table, status, expiresAt string) string {
	return t.expand(`WITH u AS (
			UPDATE {table} SET status = ` + status + `, result = $3::bytea, lease_until = NULL, expires_at = ` + expiresAt + `
			WHERE key = $1::bytea AND token = $2::bigint AND status = 1
			RETURNING 1)
		SELECT CASE count(*) WHEN 1 THEN 1 ELSE ('` + noOutcomeRow + ` ' || count(*))::int END FROM u`)
}

// restoreLockTimeout is appended to TxGuard's claims: see TxGuard.
const restoreLockTimeout = `,
			set_config('lock_timeout', current_setting('pgstore.lock_timeout'), true)`

// onConflict is claimUpdate for a statement whose cap is maxAttempts and
// whose capped cause is the parameter cause.
func onConflict(maxAttempts, cause string) string {
	return strings.NewReplacer("{max_attempts}", maxAttempts, "{cause}", cause).Replace(claimUpdate)
}

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

func validClaim(op string, a idem.ClaimArgs) error {
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
func fingerprint(a idem.ClaimArgs) []byte {
	if a.Fingerprint == nil {
		return []byte{}
	}
	return a.Fingerprint
}

// tooManyAttempts is the cause a capped claim stores.
var tooManyAttempts = idem.TooManyAttemptsCause()

// Claim implements [idem.Store.Claim]. A new key and a takeover after a
// crash (an expired record, a released one, a lease that ran out) are one
// INSERT … ON CONFLICT DO UPDATE … WHERE that takes the key, one round
// trip. A key it does not take (a duplicate, a busy key, another
// fingerprint, the attempt cap) gets a second statement, the full claim,
// which answers every outcome from the row it locks. Of concurrent claims
// of a key, PostgreSQL's unique index lets one insert and makes the others
// wait for it and then see its row. A Busy answer's record carries no
// token: the holder's is the holder's alone.
// It returns idem.ErrKeyReused for a fingerprint mismatch, a
// *ValueTooLargeError for a stored result longer than Config.MaxValueSize,
// and an error wrapping idem.ErrStoreUnavailable when the server cannot be
// reached.
func (s *Store) Claim(ctx context.Context, a idem.ClaimArgs) (idem.Claim, error) {
	if err := validClaim("Claim", a); err != nil {
		return idem.Claim{}, err
	}
	var r claimRow
	err := s.db.QueryRow(ctx, s.q.claimTake, []byte(a.Key), fingerprint(a), micros(a.Lease), micros(a.Retention),
		maxAttempts(a.MaxAttempts)).Scan(&r.token, &r.attempt, &r.leaseUntil, &r.expiresAt)
	if err == nil {
		r.taken()
		return r.claim(a)
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return idem.Claim{}, translate("claim", err)
	}
	err = s.db.QueryRow(ctx, s.q.claim, []byte(a.Key), fingerprint(a), micros(a.Lease), micros(a.Retention),
		maxAttempts(a.MaxAttempts), tooManyAttempts, int32(s.cfg.MaxValueSize)).
		Scan(&r.status, &r.token, &r.attempt, &r.sameFingerprint, &r.leaseUntil, &r.result, &r.resultSize, &r.expiresAt, &r.acquired)
	if err != nil {
		return idem.Claim{}, translate("claim", err)
	}
	return r.cappedClaim(a, s.cfg.MaxValueSize)
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
func (r *claimRow) cappedClaim(a idem.ClaimArgs, limit int) (idem.Claim, error) {
	c, err := r.claim(a)
	if err == nil && r.resultSize.Valid && int(r.resultSize.Int32) > limit {
		return idem.Claim{}, &ValueTooLargeError{Size: int(r.resultSize.Int32), Max: limit, Key: a.Key, Stored: true}
	}
	return c, err
}

// taken completes the row of a statement that returns the record only
// when it acquired the key: InProgress, with the caller's fingerprint and
// no result.
func (r *claimRow) taken() {
	r.status, r.sameFingerprint, r.result, r.acquired = statusInProgress, true, nil, true
}

// inserted completes the row of claimNew, which inserted the record.
func (r *claimRow) inserted() {
	r.taken()
	r.attempt = 1
}

func (r *claimRow) claim(a idem.ClaimArgs) (idem.Claim, error) {
	if !r.acquired && !r.sameFingerprint {
		return idem.Claim{}, idem.ErrKeyReused
	}
	rec := idem.Record{
		Key:         a.Key,
		Status:      idem.Status(r.status),
		Token:       idem.Token(r.token),
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
		return idem.Claim{Outcome: idem.Acquired, Token: rec.Token, Record: rec}, nil
	case rec.Status.Done():
		return idem.Claim{Outcome: idem.Duplicate, Record: rec}, nil
	case rec.Status == idem.StatusInProgress:
		rec.Token = 0 // the holder's token is the holder's alone: it would complete or release its lease
		return idem.Claim{Outcome: idem.Busy, Record: rec}, nil
	}
	return idem.Claim{}, fmt.Errorf("pgstore: claim: the record of key %q has status %d", a.Key, r.status)
}

// Complete implements [idem.Store.Complete] with one fenced UPDATE: no row
// matched means the token is not current, idem.ErrLeaseLost. A value over
// Config.MaxValueSize gets a *ValueTooLargeError and is not sent. The record
// expires retention from now, or keeps the expiry its claim set when that
// is no earlier and at most the rest of the lease later, so that the
// UPDATE touches no indexed column (see keptExpiry).
func (s *Store) Complete(ctx context.Context, key string, t idem.Token, value []byte, retention time.Duration) error {
	return s.finish(ctx, "complete", key, t, statusCompleted, value, retention)
}

// Fail implements [idem.Store.Fail] like Complete, storing cause.
func (s *Store) Fail(ctx context.Context, key string, t idem.Token, cause []byte, retention time.Duration) error {
	return s.finish(ctx, "fail", key, t, statusFailed, cause, retention)
}

func (s *Store) finish(ctx context.Context, op, key string, t idem.Token, status int16, result []byte, retention time.Duration) error {
	if retention <= 0 {
		return fmt.Errorf("pgstore: %s: retention %v must be positive", op, retention)
	}
	if len(result) > s.cfg.MaxValueSize {
		return &ValueTooLargeError{Size: len(result), Max: s.cfg.MaxValueSize}
	}
	return s.fenced(ctx, op, t, s.q.finish, []byte(key), int64(t), status, result, micros(retention))
}

// Release implements [idem.Store.Release]: the token becomes 0 and the
// lease ends now, so the next Claim takes over at once. idem.ErrLeaseLost
// as for Complete.
func (s *Store) Release(ctx context.Context, key string, t idem.Token) error {
	return s.fenced(ctx, "release", t, s.q.release, []byte(key), int64(t))
}

// Extend implements [idem.Store.Extend]: the lease ends lease after the
// server's statement time, and the record is kept at least the claim's
// retention after that. idem.ErrLeaseLost as for Complete.
func (s *Store) Extend(ctx context.Context, key string, t idem.Token, lease time.Duration) error {
	if lease <= 0 {
		return fmt.Errorf("pgstore: extend: lease %v must be positive", lease)
	}
	return s.fenced(ctx, "extend", t, s.q.extend, []byte(key), int64(t), micros(lease))
}

// fenced runs a holder's UPDATE; no row updated is idem.ErrLeaseLost.
func (s *Store) fenced(ctx context.Context, op string, t idem.Token, sql string, args ...any) error {
	if t == 0 { // no claim has token 0; a released record does
		return idem.ErrLeaseLost
	}
	tag, err := s.db.Exec(ctx, sql, args...)
	if err != nil {
		return translate(op, err)
	}
	if tag.RowsAffected() == 0 {
		return idem.ErrLeaseLost
	}
	return nil
}

// Get implements [idem.Store.Get]: idem.ErrNotFound for a key with no
// record or an expired one, a *ValueTooLargeError for a stored result
// longer than Config.MaxValueSize. LeaseUntil is zero on an outcome.
func (s *Store) Get(ctx context.Context, key string) (idem.Record, error) {
	rec := idem.Record{Key: key}
	var status int16
	var token int64
	var attempt int32
	var leaseUntil pgtype.Timestamptz
	var resultSize pgtype.Int4
	err := s.db.QueryRow(ctx, s.q.get, []byte(key), int32(s.cfg.MaxValueSize)).
		Scan(&status, &token, &attempt, &rec.Fingerprint, &leaseUntil, &rec.Result, &resultSize, &rec.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return idem.Record{}, idem.ErrNotFound
	}
	if err != nil {
		return idem.Record{}, translate("get", err)
	}
	if resultSize.Valid && int(resultSize.Int32) > s.cfg.MaxValueSize {
		return idem.Record{}, &ValueTooLargeError{Size: int(resultSize.Int32), Max: s.cfg.MaxValueSize, Key: key, Stored: true}
	}
	rec.Status, rec.Token, rec.Attempt = idem.Status(status), idem.Token(token), int(attempt)
	if leaseUntil.Valid {
		rec.LeaseUntil = leaseUntil.Time
	}
	return rec, nil
}

// Delete implements [idem.Store.Delete]; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	_, err := s.db.Exec(ctx, s.q.delete, []byte(key))
	return translate("delete", err)
}

// keptExpiry is the expires_at an outcome of retention ret writes: the
// retention from now, or the row's expires_at as it is when that is no
// earlier and no later than the lease end plus ret. A claim sets
// expires_at to its lease end plus its retention, so an outcome stored
// within the lease with the claim's retention keeps it: the UPDATE then
// changes no indexed column and can be HOT (heap-only: no new entry in
// the key or expiry index, much less to write). The record is then kept
// its retention plus at most the rest of the lease.
func keptExpiry(ret string) string {
	now := "statement_timestamp() + " + ret
	return `CASE WHEN expires_at >= ` + now + ` AND expires_at <= lease_until + ` + ret + ` THEN expires_at ELSE ` + now + ` END`
}
