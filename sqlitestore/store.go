package sqlitestore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemgo/idem/internal/scanpage"
	"github.com/idemgo/idem/storage"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite", pure Go
)

// Config configures a [Store]. The zero value means every default.
type Config struct {
	// Table is the records table, created by [Open] (see [Migrate]):
	// lowercase ASCII letters, digits and underscores, not starting with
	// a digit, at most 48 bytes. Default [DefaultTable].
	Table string

	// MaxValueSize is the longest value (Complete, CompleteBatch) or
	// encoded cause (Fail) accepted, in bytes; a longer one gets a
	// *storage.ValueTooLargeError and nothing is written. It also bounds what is
	// read: a record holding a longer result (written by a Store with a
	// larger MaxValueSize) is refused by Claim, ClaimBatch and Get with a
	// *storage.ValueTooLargeError. Default 1 MiB; at most MaxValueSizeLimit.
	MaxValueSize int

	// Synchronous is SQLite's synchronous setting for the Store's
	// connections: SyncFull (the default) or SyncNormal. With SyncFull
	// every commit (a claim, an outcome) is on disk when the call returns:
	// neither a crash of the process nor one of the machine (power loss,
	// kernel panic) loses a stored outcome. With SyncNormal a commit
	// reaches the write-ahead log but is synced only at the next
	// checkpoint: a crash of the process still loses nothing (the
	// operating system holds the writes), but a power loss or a crash of
	// the machine may roll back the last commits before the checkpoint,
	// and a key whose outcome was lost so runs again. SyncNormal is
	// several times faster on a disk whose fsync is slow.
	Synchronous Synchronous

	// BusyTimeout bounds how long a write waits for the database's write
	// lock, which SQLite gives one connection at a time: held by another
	// write of this Store (they queue in the process), by a transaction
	// of the caller's (a TxGuard, a transaction begun on [Store.DB]) or
	// by another process on the same file. A write that cannot have it in
	// time fails with an error wrapping storage.ErrStoreUnavailable (a
	// TxGuard's claim: idem.ErrInProgress). It is also SQLite's
	// busy_timeout. Default 5s; at least 1ms.
	BusyTimeout time.Duration

	// MaxOpenConns is the most connections the Store's database opens:
	// reads run on any number of them at once (WAL mode), writes on one
	// at a time. Default 8.
	MaxOpenConns int

	// Now is the Store's clock, which decides when leases end and records
	// expire. Several processes on one file share the machine's clock.
	// Default time.Now.
	Now func() time.Time
}

// Synchronous is SQLite's synchronous setting: see Config.Synchronous.
type Synchronous uint8

// The values of [Synchronous].
const (
	SyncFull   Synchronous = iota // PRAGMA synchronous = FULL: every commit synced
	SyncNormal                    // PRAGMA synchronous = NORMAL: synced at checkpoints
)

// Defaults and limits of [Config].
const (
	DefaultTable        = "idem_records"
	DefaultMaxValueSize = 1 << 20
	MaxValueSizeLimit   = 256 << 20
	DefaultBusyTimeout  = 5 * time.Second
	DefaultMaxOpenConns = 8
)

// Store is an [storage.Store] in a SQLite database file: one process, durable,
// no server. It opens the file in WAL mode, so that reads never wait for a
// write, with synchronous FULL by default (Config.Synchronous) and a busy
// timeout (Config.BusyTimeout). Writes take SQLite's write lock one at a
// time: those of one Store queue in the process, others (another process,
// a transaction of the caller's) wait at most BusyTimeout.
//
// A claim first reads the key's record, which answers a duplicate, a busy
// key or another fingerprint with no write and no lock. The other claims
// (a new key, a takeover, the attempt cap) run in one short BEGIN
// IMMEDIATE transaction that reads the record again and writes it. Every
// other method is one statement, ClaimBatch and CompleteBatch one
// transaction (one sync to disk for the batch). Time is Config.Now, in
// microseconds. Tokens are random 64-bit numbers (crypto/rand, never 0).
//
// Expired records stay in the file, invisible to every method, until
// [Store.Reap] deletes them or a claim of the key replaces them.
//
// Several processes may open one file on a local file system: SQLite's
// locks keep their writes apart. Not on a network file system (NFS, SMB),
// whose locks SQLite cannot rely on and where WAL mode does not work.
type Store struct {
	db    *sql.DB
	cfg   Config
	t     table
	q     queries
	write chan struct{} // the right to write, one holder at a time
}

var (
	_ storage.Store   = (*Store)(nil)
	_ storage.Scanner = (*Store)(nil)
)

// Open opens (creating it if need be) the SQLite database file path and
// its records table ([Migrate]), and returns a Store over it. It fails when
// a field of cfg is out of range (the error names it), when path is empty,
// ":memory:" or holds a '?' or a NUL, or when the file cannot be opened in
// WAL mode (a read-only directory, a network file system). Close it when
// done.
//
// The records hold what the operations returned: a file Open creates is
// readable and writable by its owner only (0600), and so are the -wal and
// -shm files beside it, which SQLite creates with the database file's
// mode. A file that exists keeps its mode: to share it with a group,
// create it (or chmod it) first.
func Open(ctx context.Context, path string, cfg Config) (*Store, error) {
	t, err := parseTable(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: Config.Table: %w", err)
	}
	switch {
	case path == "" || path == ":memory:" || strings.HasPrefix(path, "file:"):
		return nil, fmt.Errorf("sqlitestore: Open: path %q: want the name of a database file (memstore keeps records in memory)", path)
	case strings.ContainsRune(path, '?'):
		return nil, fmt.Errorf("sqlitestore: Open: path %q: a '?' would start SQLite's parameters", path)
	case strings.ContainsRune(path, 0):
		return nil, fmt.Errorf("sqlitestore: Open: path %q: holds a NUL byte, where SQLite would end it and open another file", path)
	case cfg.MaxValueSize < 0 || cfg.MaxValueSize > MaxValueSizeLimit:
		return nil, fmt.Errorf("sqlitestore: Config.MaxValueSize %d: must be between 1 and %d", cfg.MaxValueSize, MaxValueSizeLimit)
	case cfg.Synchronous > SyncNormal:
		return nil, fmt.Errorf("sqlitestore: Config.Synchronous %d: not a Synchronous", cfg.Synchronous)
	case cfg.BusyTimeout < 0 || (cfg.BusyTimeout > 0 && cfg.BusyTimeout < time.Millisecond):
		return nil, fmt.Errorf("sqlitestore: Config.BusyTimeout %v: must be at least 1ms", cfg.BusyTimeout)
	case cfg.MaxOpenConns < 0:
		return nil, fmt.Errorf("sqlitestore: Config.MaxOpenConns %d: must not be negative", cfg.MaxOpenConns)
	}
	cfg.Table = t.name
	cfg.MaxValueSize = cmp.Or(cfg.MaxValueSize, DefaultMaxValueSize)
	cfg.BusyTimeout = cmp.Or(cfg.BusyTimeout, DefaultBusyTimeout)
	cfg.MaxOpenConns = cmp.Or(cfg.MaxOpenConns, DefaultMaxOpenConns)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := create(path); err != nil {
		return nil, fmt.Errorf("sqlitestore: Open %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", dsn(path, cfg))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: Open %s: %w", path, err)
	}
	db.SetMaxOpenConns(cfg.MaxOpenConns)
	db.SetMaxIdleConns(cfg.MaxOpenConns)
	s := &Store{db: db, cfg: cfg, t: t, q: newQueries(t), write: make(chan struct{}, 1)}
	if err := s.open(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: Open %s: %w", path, err)
	}
	return s, nil
}

// create creates the database file path, empty and 0600, unless it
// exists: SQLite would create it with 0644, and its -wal and -shm files
// with the same mode.
func create(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// dsn is the data source name of path for the driver: SQLite's settings
// for every connection it opens. Transactions begin IMMEDIATE, taking the
// write lock at BEGIN: a transaction that read first and wrote later
// could find the file changed since its read and fail at once (SQLite's
// SQLITE_BUSY_SNAPSHOT), where an immediate one waits its turn.
func dsn(path string, cfg Config) string {
	sync := "FULL"
	if cfg.Synchronous == SyncNormal {
		sync = "NORMAL"
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+sync+")")
	q.Set("_txlock", "immediate")
	return path + "?" + q.Encode()
}

// open checks that the file is in WAL mode and creates the records table.
func (s *Store) open(ctx context.Context) error {
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return translate(ctx, "open", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("the database is in journal mode %q, not WAL (a network file system?)", mode)
	}
	return s.locked(ctx, "migrate", func(ctx context.Context) error { return migrate(ctx, s.db, s.t) })
}

// DB returns the Store's database, for the caller's own tables and
// transactions (a [TxGuard]'s DoTx, outbox.EnqueueSQL): a transaction
// begun on it is BEGIN IMMEDIATE, holding the write lock until it ends.
// Keep such transactions short: the Store's writes wait for them (at most
// Config.BusyTimeout). Close the Store, not the DB.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the Store's database. Calls after Close fail.
func (s *Store) Close() error { return s.db.Close() }

// MaxValueSize returns Config.MaxValueSize, implementing idem's
// ValueLimiter.
func (s *Store) MaxValueSize() int { return s.cfg.MaxValueSize }

// Table returns the records table's quoted name, for SQL of one's own.
func (s *Store) Table() string { return s.t.ident }

// locked runs fn holding the Store's right to write, which it waits for at
// most Config.BusyTimeout; fn's own waits for SQLite's write lock are
// bounded by the same deadline.
func (s *Store) locked(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.BusyTimeout)
	defer cancel()
	select {
	case s.write <- struct{}{}:
	case <-ctx.Done():
		return s.busy(ctx, op)
	}
	defer func() { <-s.write }()
	err := fn(ctx)
	if err != nil && ctx.Err() != nil && !errors.Is(err, storage.ErrLeaseLost) {
		return s.busy(ctx, op)
	}
	return err
}

// busy is the error of a write whose deadline, ctx's, passed: the
// caller's cancellation, or the busy timeout.
func (s *Store) busy(ctx context.Context, op string) error {
	if err := context.Cause(ctx); errors.Is(err, context.Canceled) {
		return fmt.Errorf("sqlitestore: %s: %w", op, err)
	}
	return fmt.Errorf("sqlitestore: %s: %w: the database was busy for %v", op, storage.ErrStoreUnavailable, s.cfg.BusyTimeout)
}

// inTx runs fn in a transaction (BEGIN IMMEDIATE) holding the right to
// write, and commits it when fn returns nil.
func (s *Store) inTx(ctx context.Context, op string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.locked(ctx, op, func(ctx context.Context) error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return translate(ctx, op, err)
		}
		if err := fn(ctx, tx); err != nil {
			tx.Rollback()
			return err
		}
		return translate(ctx, op, tx.Commit())
	})
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// The status column's values.
const (
	statusInProgress = int64(storage.StatusInProgress)
	statusCompleted  = int64(storage.StatusCompleted)
	statusFailed     = int64(storage.StatusFailed)
)

// micros is d in whole microseconds, rounded up so that a positive
// duration stays positive. A time.Duration is at most 292 years: added to
// a time of this era in microseconds, it cannot overflow.
func micros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond > 0 {
		us++
	}
	return us
}

// now is the Store's clock in microseconds since the Unix epoch.
func (s *Store) now() int64 { return s.cfg.Now().UnixMicro() }

func validClaim(op string, a storage.ClaimArgs) error {
	switch {
	case a.Lease <= 0:
		return fmt.Errorf("sqlitestore: %s: lease %v must be positive", op, a.Lease)
	case a.Retention <= 0:
		return fmt.Errorf("sqlitestore: %s: retention %v must be positive", op, a.Retention)
	}
	return nil
}

// fingerprint is a's fingerprint as a parameter: never NULL.
func fingerprint(a storage.ClaimArgs) []byte {
	if a.Fingerprint == nil {
		return []byte{}
	}
	return a.Fingerprint
}

// newToken returns a random token, never 0.
func newToken() int64 {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails (crypto/rand)
		if t := int64(binary.LittleEndian.Uint64(b[:])); t != 0 {
			return t
		}
	}
}

// record is a row of the records table as the statements read it.
type record struct {
	status, token, attempt int64
	fingerprint            []byte
	leaseUntil             sql.NullInt64
	retention              int64
	result                 []byte
	size                   sql.NullInt64 // the stored result's length
	expiresAt              int64
}

// read reads the live record of key, its result left out when longer than
// limit (size tells it). found is false for no record, or an expired one.
func (s *Store) read(ctx context.Context, q querier, key string, limit int, now int64) (r record, found bool, err error) {
	err = q.QueryRowContext(ctx, s.q.read, []byte(key), limit, now).Scan(
		&r.status, &r.token, &r.attempt, &r.fingerprint, &r.leaseUntil, &r.retention, &r.result, &r.size, &r.expiresAt)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// tooLarge is the error of a read whose record holds a result longer than
// limit.
func (r *record) tooLarge(key string, limit int) error {
	if r.size.Valid && r.size.Int64 > int64(limit) {
		return &storage.ValueTooLargeError{Store: "sqlitestore", Size: int(r.size.Int64), Max: limit, Key: strings.Clone(key), Stored: true}
	}
	return nil
}

// idemRecord is r as a storage.Record of key.
func (r *record) idemRecord(key string, fp []byte) storage.Record {
	rec := storage.Record{
		Key:         key,
		Status:      storage.Status(r.status),
		Token:       storage.Token(r.token),
		Attempt:     int(r.attempt),
		Fingerprint: fp,
		Result:      r.result,
		ExpiresAt:   time.UnixMicro(r.expiresAt),
	}
	if r.leaseUntil.Valid {
		rec.LeaseUntil = time.UnixMicro(r.leaseUntil.Int64)
	}
	return rec
}

// answer returns the claim of a that the live record r answers as it is,
// with no write: another fingerprint (ErrKeyReused), an outcome
// (Duplicate) or a live lease (Busy). done is false when the claim has to
// write: no record, or one to take over or cap.
func answer(a storage.ClaimArgs, r *record, found bool, limit int, now int64) (c storage.Claim, done bool, err error) {
	switch {
	case !found:
		return c, false, nil
	case !bytes.Equal(r.fingerprint, fingerprint(a)):
		return c, true, storage.ErrKeyReused
	case r.status == statusCompleted || r.status == statusFailed:
		if err := r.tooLarge(a.Key, limit); err != nil {
			return c, true, err
		}
		return storage.Claim{Outcome: storage.Duplicate, Record: r.idemRecord(a.Key, a.Fingerprint)}, true, nil
	case r.status != statusInProgress:
		return c, true, fmt.Errorf("sqlitestore: claim: the record of key %q has status %d", a.Key, r.status)
	case r.token != 0 && r.leaseUntil.Valid && r.leaseUntil.Int64 > now:
		rec := r.idemRecord(a.Key, a.Fingerprint)
		rec.Token = 0 // the holder's token is the holder's alone
		return storage.Claim{Outcome: storage.Busy, Record: rec}, true, nil
	}
	return c, false, nil
}

// Claim implements [storage.Store.Claim]. It reads the key's record first,
// which answers a duplicate, a busy key or another fingerprint with no
// write and no lock. Any other claim (a new key, a takeover after a crash
// or a Release, the attempt cap) runs in a BEGIN IMMEDIATE transaction
// that reads the record again, now under the write lock, and writes it:
// of concurrent claims of a key, in this process or another, exactly one
// acquires it. A Busy answer's record carries no token.
//
// It returns storage.ErrKeyReused for a fingerprint mismatch, a
// *storage.ValueTooLargeError for a stored result longer than Config.MaxValueSize,
// and an error wrapping storage.ErrStoreUnavailable when the database cannot
// be read or written, or stays locked for Config.BusyTimeout.
func (s *Store) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if err := validClaim("Claim", a); err != nil {
		return storage.Claim{}, err
	}
	r, found, err := s.read(ctx, s.db, a.Key, s.cfg.MaxValueSize, s.now())
	if err != nil {
		return storage.Claim{}, translate(ctx, "claim", err)
	}
	if c, done, err := answer(a, &r, found, s.cfg.MaxValueSize, s.now()); done {
		return c, err
	}
	var c storage.Claim
	err = s.inTx(ctx, "claim", func(ctx context.Context, tx *sql.Tx) (err error) {
		c, err = s.claimIn(ctx, tx, a, s.cfg.MaxValueSize)
		return err
	})
	return c, err
}

// claimIn claims a in tx, which holds the write lock: it reads the record
// and answers from it, or writes the claim. Results longer than limit are
// refused.
func (s *Store) claimIn(ctx context.Context, tx *sql.Tx, a storage.ClaimArgs, limit int) (storage.Claim, error) {
	now := s.now()
	r, found, err := s.read(ctx, tx, a.Key, limit, now)
	if err != nil {
		return storage.Claim{}, translate(ctx, "claim", err)
	}
	if c, done, err := answer(a, &r, found, limit, now); done {
		return c, err
	}
	lease, retention := micros(a.Lease), micros(a.Retention)
	w := record{status: statusInProgress, token: newToken(), attempt: 1, fingerprint: fingerprint(a),
		leaseUntil: sql.NullInt64{Int64: now + lease, Valid: true}, retention: retention, expiresAt: now + lease + retention}
	outcome := storage.Acquired
	if found { // a takeover: the lease ran out, or was released
		w.attempt = r.attempt + 1
		if a.MaxAttempts > 0 && r.attempt >= int64(a.MaxAttempts) {
			w = record{status: statusFailed, attempt: r.attempt, fingerprint: r.fingerprint, retention: retention,
				result: tooManyAttempts, expiresAt: now + retention}
			outcome = storage.Duplicate
		}
	}
	if _, err := tx.ExecContext(ctx, s.q.put, []byte(a.Key), w.status, w.token, w.attempt, w.fingerprint,
		w.leaseUntil, w.retention, w.result, w.expiresAt); err != nil {
		return storage.Claim{}, translate(ctx, "claim", err)
	}
	rec := w.idemRecord(a.Key, a.Fingerprint)
	if outcome == storage.Duplicate {
		return storage.Claim{Outcome: storage.Duplicate, Record: rec}, nil
	}
	return storage.Claim{Outcome: storage.Acquired, Token: rec.Token, Record: rec}, nil
}

// tooManyAttempts is the cause a capped claim stores.
var tooManyAttempts = storage.TooManyAttemptsCause()

// Complete implements [storage.Store.Complete] with one fenced UPDATE: no row
// matched means the token is not current, storage.ErrLeaseLost. A value over
// Config.MaxValueSize gets a *storage.ValueTooLargeError and is not written. The
// record expires retention from now.
func (s *Store) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	return s.finish(ctx, "complete", key, t, statusCompleted, value, retention)
}

// Fail implements [storage.Store.Fail] as Complete does, storing the encoded
// cause as a Failed outcome.
func (s *Store) Fail(ctx context.Context, key string, t storage.Token, cause []byte, retention time.Duration) error {
	return s.finish(ctx, "fail", key, t, statusFailed, cause, retention)
}

func (s *Store) finish(ctx context.Context, op, key string, t storage.Token, status int64, result []byte, retention time.Duration) error {
	switch {
	case retention <= 0:
		return fmt.Errorf("sqlitestore: %s: retention %v must be positive", op, retention)
	case len(result) > s.cfg.MaxValueSize:
		return &storage.ValueTooLargeError{Store: "sqlitestore", Size: len(result), Max: s.cfg.MaxValueSize}
	}
	if result == nil {
		result = []byte{} // an outcome's result is never NULL
	}
	return s.holder(ctx, op, key, t, func(ctx context.Context, now int64) (sql.Result, error) {
		return s.db.ExecContext(ctx, s.q.finish, []byte(key), int64(t), now, status, result, now+micros(retention))
	})
}

// holder runs the fenced statement of a holder's call (exec, given the
// time) and returns storage.ErrLeaseLost when it matched no row. Token 0 is
// never current.
func (s *Store) holder(ctx context.Context, op, key string, t storage.Token, exec func(ctx context.Context, now int64) (sql.Result, error)) error {
	if t == 0 {
		return fmt.Errorf("sqlitestore: %s (key %q): %w", op, key, storage.ErrLeaseLost)
	}
	return s.locked(ctx, op, func(ctx context.Context) error {
		res, err := exec(ctx, s.now())
		if err != nil {
			return translate(ctx, op, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("sqlitestore: %s (key %q): %w", op, key, storage.ErrLeaseLost)
		}
		return nil
	})
}

// Release implements [storage.Store.Release]: the lease ends now and no
// token is current, so the next claim takes over at once. ErrLeaseLost as
// for Complete.
func (s *Store) Release(ctx context.Context, key string, t storage.Token) error {
	return s.holder(ctx, "release", key, t, func(ctx context.Context, now int64) (sql.Result, error) {
		return s.db.ExecContext(ctx, s.q.release, []byte(key), int64(t), now)
	})
}

// Extend implements [storage.Store.Extend]: the lease ends lease from now,
// and the record stays at least the claim's retention after that.
// ErrLeaseLost as for Complete.
func (s *Store) Extend(ctx context.Context, key string, t storage.Token, lease time.Duration) error {
	if lease <= 0 {
		return fmt.Errorf("sqlitestore: extend: lease %v must be positive", lease)
	}
	return s.holder(ctx, "extend", key, t, func(ctx context.Context, now int64) (sql.Result, error) {
		return s.db.ExecContext(ctx, s.q.extend, []byte(key), int64(t), now, now+micros(lease))
	})
}

// Get implements [storage.Store.Get]: the live record of key, or
// storage.ErrNotFound. A stored result longer than Config.MaxValueSize is a
// *storage.ValueTooLargeError.
func (s *Store) Get(ctx context.Context, key string) (storage.Record, error) {
	r, found, err := s.read(ctx, s.db, key, s.cfg.MaxValueSize, s.now())
	switch {
	case err != nil:
		return storage.Record{}, translate(ctx, "get", err)
	case !found:
		return storage.Record{}, storage.ErrNotFound
	}
	if err := r.tooLarge(key, s.cfg.MaxValueSize); err != nil {
		return storage.Record{}, err
	}
	return r.idemRecord(key, r.fingerprint), nil
}

// scanPage is how many records a Scan reads per statement.
const scanPage = 500

// Scan implements [storage.Scanner], one statement per page of scanPage
// records in key order from prefix. A record holding a result longer than
// Config.MaxValueSize is listed without it.
func (s *Store) Scan(ctx context.Context, prefix string, fn func(storage.Record) bool) error {
	return scanpage.Scan(ctx, prefix, scanPage, s.scanPage, fn)
}

// scanPage reads one page of Scan.
func (s *Store) scanPage(ctx context.Context, from []byte, inclusive bool) ([]storage.Record, error) {
	rows, err := s.db.QueryContext(ctx, s.q.scan, from, s.cfg.MaxValueSize, inclusive, s.now(), scanPage)
	if err != nil {
		return nil, translate(ctx, "scan", err)
	}
	defer rows.Close()
	var recs []storage.Record
	for rows.Next() {
		var key []byte
		var r record
		if err := rows.Scan(&key, &r.status, &r.token, &r.attempt, &r.fingerprint, &r.leaseUntil, &r.retention, &r.result, &r.size, &r.expiresAt); err != nil {
			return nil, translate(ctx, "scan", err)
		}
		recs = append(recs, r.idemRecord(string(key), r.fingerprint))
	}
	return recs, translate(ctx, "scan", rows.Err())
}

// Delete implements [storage.Store.Delete]: the key's record is gone,
// whatever its status; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.locked(ctx, "delete", func(ctx context.Context) error {
		_, err := s.db.ExecContext(ctx, s.q.delete, []byte(key))
		return translate(ctx, "delete", err)
	})
}

// DeleteIf implements [storage.Store.DeleteIf] in one transaction holding
// the write lock, which reads the record and deletes it when it is live
// (on the Store's clock, Config.Now) with the status and token given.
func (s *Store) DeleteIf(ctx context.Context, key string, status storage.Status, t storage.Token) error {
	return s.inTx(ctx, "delete", func(ctx context.Context, tx *sql.Tx) error {
		r, found, err := s.read(ctx, tx, key, 0, s.now())
		switch {
		case err != nil:
			return translate(ctx, "delete", err)
		case !found:
			return storage.ErrNotFound
		case storage.Status(r.status) != status || storage.Token(r.token) != t:
			return storage.ErrChanged
		}
		_, err = tx.ExecContext(ctx, s.q.delete, []byte(key))
		return translate(ctx, "delete", err)
	})
}

// DefaultReapBatch is the batch of [Store.Reap] when it is given none.
const DefaultReapBatch = 1000

// Reap deletes the expired records, at most batch rows per statement
// (DefaultReapBatch when batch ≤ 0), until fewer than batch were left or
// ctx ends, and returns how many it deleted. Each statement is a short
// write of its own, so claims are not kept waiting behind a long one.
// Expired records are invisible to every method anyway; Reap gives their
// space back (to SQLite's free list: the file shrinks only with VACUUM).
func (s *Store) Reap(ctx context.Context, batch int) (deleted int, err error) {
	if batch <= 0 {
		batch = DefaultReapBatch
	}
	for {
		var n int64
		err := s.locked(ctx, "reap", func(ctx context.Context) error {
			res, err := s.db.ExecContext(ctx, s.q.reap, s.now(), batch)
			if err != nil {
				return translate(ctx, "reap", err)
			}
			n, err = res.RowsAffected()
			return translate(ctx, "reap", err)
		})
		deleted += int(n)
		if err != nil {
			return deleted, err
		}
		if n < int64(batch) {
			return deleted, nil
		}
		if err := ctx.Err(); err != nil {
			return deleted, fmt.Errorf("sqlitestore: reap: %w", err)
		}
	}
}
