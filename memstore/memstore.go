package memstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem/storage"
)

// ErrFull is returned by Claim for a new key, and by Complete and Fail,
// when the record would not fit within Config.MaxEntries and
// Config.MaxBytes and no record could be evicted to make room (see
// [Store]). The Guard reports it as storage.ErrStoreUnavailable (fail closed).
var ErrFull = errors.New("memstore: full")

// Config configures a [Store]. The zero value means every default.
type Config struct {
	// MaxEntries caps the records held. A new key beyond it evicts a
	// record (see [Store]), or fails with ErrFull when none can go.
	// Default 1,000,000.
	MaxEntries int

	// MaxBytes caps the memory the records take, approximately: each
	// counts its key, fingerprint and result, and EntryOverhead bytes for
	// its share of the maps. A record or an outcome beyond it evicts
	// records (see [Store]), or fails with ErrFull when none can go.
	// Default 256 MiB; at least MaxValueSize.
	MaxBytes int

	// MaxValueSize is the longest value (Complete) or encoded cause (Fail)
	// accepted, in bytes; a longer one gets a *storage.ValueTooLargeError and
	// nothing is written. Default 1 MiB; at most MaxValueSizeLimit.
	MaxValueSize int

	// SweepInterval is how often expired records are removed in the
	// background; they are also removed when their key is next touched.
	// Default 1m.
	SweepInterval time.Duration

	// Now is the store's clock. Default time.Now; tests inject their own.
	Now func() time.Time

	// OnEvict, when set, is called for every record evicted to make room,
	// on the goroutine of the call that needed the room, once the store's
	// locks are released; it may call the Store. Records that expired are
	// removed without it.
	OnEvict func(Eviction)

	// Logger receives a warning when records are evicted to make room: at
	// once, then at most one line a minute (on the store's clock) with the
	// count since the last. Default slog.Default().
	Logger *slog.Logger
}

// Defaults and limits of [Config].
const (
	DefaultMaxEntries    = 1_000_000
	DefaultMaxBytes      = 256 << 20
	DefaultMaxValueSize  = 1 << 20
	DefaultSweepInterval = time.Minute
	MaxValueSizeLimit    = 256 << 20
)

const shardCount = 64 // a power of two

// Store is the in-process [storage.Store]: records live in this process's
// memory, in sharded maps, and die with it. Every transition runs under its
// shard's mutex, so it is atomic. Tokens come from a store-wide counter, so
// no token repeats for a key while the Store lives.
//
// The records are bounded in number (Config.MaxEntries) and in bytes
// (Config.MaxBytes). When a new key or an outcome would not fit, the store
// evicts records to make room, instead of refusing everyone until records
// expire: first the released records whose claim had no attempt cap (they
// hold no outcome, and no attempt count that matters), oldest released
// first; then those released under an attempt cap (the key's count of
// attempts starts again: under memory pressure a poison message gets
// MaxAttempts more, rather than other keys an outage); then the finished
// ones (Completed, Failed), oldest finished first. It refuses with ErrFull
// only when nothing can go: every record is in progress. An evicted
// outcome is forgotten before its retention ends: a duplicate of its key
// runs the operation again. Evictions are reported to Config.OnEvict and
// Config.Logger.
//
// A Store runs one sweeper goroutine; [Store.Close] stops it (and so does
// the garbage collector once the Store is unreachable).
type Store struct {
	*store // the sweeper holds *store, never *Store, so a lost Store is collected
}

type store struct {
	cfg       Config
	seed      maphash.Seed
	shards    [shardCount]shard
	count     atomic.Int64 // records held, expired ones until removed
	bytes     atomic.Int64 // their size (see entrySize)
	tokens    atomic.Uint64
	queued    atomic.Uint64 // the sequence of records queued for eviction
	fullSweep atomic.Int64  // when makeRoom last swept the store, store-clock ns
	evicted   evictionLog
	quit      chan struct{}
	stopped   chan struct{}
	once      sync.Once
}

type shard struct {
	mu      sync.Mutex
	m       map[string]entry
	victims [kinds]fifo // its records to evict, by kind (see Store), oldest first
	_       [48]byte    // keep shards on separate cache lines
}

// entry is one record, held by value in its shard's map so a new record
// costs no allocation of its own (Go maps keep values of up to 128 bytes
// inline). Times are store-clock Unix nanoseconds.
type entry struct {
	token      storage.Token
	leaseUntil int64
	expires    int64
	retention  time.Duration // the claim's, for Extend to move expires
	result     []byte
	fpLong     []byte   // a fingerprint longer than fpShort
	fpShort    [32]byte // a fingerprint of up to 32 bytes (SHA-256's), inline
	attempt    uint32
	status     storage.Status
	fpLen      uint8 // length of the fingerprint in fpShort
	capped     bool  // the claim had an attempt cap (MaxAttempts > 0)
}

func (e *entry) fingerprint() []byte {
	if e.fpLong != nil {
		return e.fpLong
	}
	return e.fpShort[:e.fpLen]
}

func (e *entry) setFingerprint(fp []byte) {
	if len(fp) <= len(e.fpShort) {
		e.fpLen = uint8(copy(e.fpShort[:], fp))
		return
	}
	e.fpLong = bytes.Clone(fp)
}

var (
	_ storage.Store   = (*Store)(nil)
	_ storage.Scanner = (*Store)(nil)
)

// New returns a Store. It fails when a Config field is out of range; the
// error names it.
func New(cfg Config) (*Store, error) {
	switch {
	case cfg.MaxEntries < 0:
		return nil, fmt.Errorf("memstore: Config.MaxEntries %d: must not be negative", cfg.MaxEntries)
	case cfg.MaxValueSize < 0 || cfg.MaxValueSize > MaxValueSizeLimit:
		return nil, fmt.Errorf("memstore: Config.MaxValueSize %d: must be between 1 and %d", cfg.MaxValueSize, MaxValueSizeLimit)
	case cfg.MaxBytes < 0:
		return nil, fmt.Errorf("memstore: Config.MaxBytes %d: must not be negative", cfg.MaxBytes)
	case cfg.SweepInterval < 0:
		return nil, fmt.Errorf("memstore: Config.SweepInterval %v: must not be negative", cfg.SweepInterval)
	}
	cfg.MaxEntries = cmp.Or(cfg.MaxEntries, DefaultMaxEntries)
	cfg.MaxBytes = cmp.Or(cfg.MaxBytes, DefaultMaxBytes)
	cfg.MaxValueSize = cmp.Or(cfg.MaxValueSize, DefaultMaxValueSize)
	if cfg.MaxBytes < cfg.MaxValueSize+EntryOverhead {
		return nil, fmt.Errorf("memstore: Config.MaxBytes %d: must hold a record with a value of MaxValueSize (%d bytes) and its overhead (%d)",
			cfg.MaxBytes, cfg.MaxValueSize, EntryOverhead)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, DefaultSweepInterval)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &store{cfg: cfg, seed: maphash.MakeSeed(), quit: make(chan struct{}), stopped: make(chan struct{})}
	for i := range s.shards {
		s.shards[i].m = make(map[string]entry)
	}
	go s.sweeper()
	h := &Store{s}
	runtime.AddCleanup(h, func(s *store) { s.close() }, s)
	return h, nil
}

// Close stops the sweeper and waits for it. The records stay readable.
// Close is idempotent.
func (s *Store) Close() error {
	s.close()
	return nil
}

// close stops the sweeper; a second call, or one from the garbage
// collector's cleanup after Close, touches no channel, so a Store made and
// closed inside a testing/synctest bubble may be collected outside it.
func (s *store) close() {
	s.once.Do(func() {
		close(s.quit)
		<-s.stopped
	})
}

// MaxValueSize returns Config.MaxValueSize: the longest value or cause, in
// bytes, that Complete, Fail and CompleteBatch accept. It implements idem's
// ValueLimiter, so that a caller can keep its values within it.
func (s *Store) MaxValueSize() int { return s.cfg.MaxValueSize }

// Len returns how many records the store holds, expired ones included until
// they are swept.
func (s *Store) Len() int { return int(s.count.Load()) }

// Bytes returns the size of the records the store holds, as counted
// against Config.MaxBytes.
func (s *Store) Bytes() int { return int(s.bytes.Load()) }

func (s *store) sweeper() {
	defer close(s.stopped)
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.sweep()
		case <-s.quit:
			return
		}
	}
}

// sweep removes the expired records, and the eviction queues' entries for
// records that are gone, one shard at a time.
func (s *store) sweep() {
	now := s.cfg.Now().UnixNano()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expires <= now {
				s.remove(sh, k, &e)
			}
		}
		sh.compactVictims(now)
		sh.mu.Unlock()
	}
}

// Sweep removes the expired records now, as the background sweeper does
// every SweepInterval.
func (s *Store) Sweep() { s.sweep() }

func (s *store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&(shardCount-1)]
}

// live returns the key's unexpired entry, removing an expired one. The
// shard is locked.
func (s *store) live(sh *shard, key string, now int64) (entry, bool) {
	e, ok := sh.m[key]
	if ok && e.expires <= now {
		s.remove(sh, key, &e)
		return entry{}, false
	}
	return e, ok
}

// remove deletes the key's entry e. The shard is locked.
func (s *store) remove(sh *shard, key string, e *entry) {
	delete(sh.m, key)
	s.count.Add(-1)
	s.bytes.Add(-entrySize(key, e))
}

func validClaim(a storage.ClaimArgs) error {
	switch {
	case a.Lease <= 0:
		return fmt.Errorf("memstore: Claim: lease %v must be positive", a.Lease)
	case a.Retention <= 0:
		return fmt.Errorf("memstore: Claim: retention %v must be positive", a.Retention)
	}
	return nil
}

// Claim implements [storage.Store.Claim]; it returns ErrFull for a new key when
// the store is full. A Busy answer's record carries no token: the holder's
// is the holder's alone.
func (s *Store) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	if err := ctx.Err(); err != nil {
		return storage.Claim{}, err
	}
	if err := validClaim(a); err != nil {
		return storage.Claim{}, err
	}
	return s.claim(a)
}

// claim claims a, making room when it needs some.
func (s *store) claim(a storage.ClaimArgs) (storage.Claim, error) {
	for {
		sh := s.shard(a.Key)
		sh.mu.Lock()
		c, err := s.claimLocked(sh, a, s.cfg.Now())
		sh.mu.Unlock()
		if again, err := s.makeRoomFor(err); !again {
			return c, err
		}
	}
}

func (s *store) claimLocked(sh *shard, a storage.ClaimArgs, clock time.Time) (storage.Claim, error) {
	now := clock.UnixNano()
	e, ok := s.live(sh, a.Key, now)
	if !ok {
		a.Key = strings.Clone(a.Key) // kept as the map's key: the caller's bytes may be reused (see storage.Store)
		e = entry{status: storage.StatusInProgress, attempt: 1, retention: a.Retention}
		e.setFingerprint(a.Fingerprint)
		if err := s.reserve(1, entrySize(a.Key, &e)); err != nil {
			return storage.Claim{}, err
		}
		s.acquire(&e, a, now)
		sh.m[a.Key] = e
		return storage.Claim{Outcome: storage.Acquired, Token: e.token, Record: e.record(a.Key, a.Fingerprint, nil)}, nil
	}
	if !bytes.Equal(e.fingerprint(), a.Fingerprint) {
		return storage.Claim{}, storage.ErrKeyReused
	}
	switch {
	case e.status.Done():
		return storage.Claim{Outcome: storage.Duplicate, Record: e.record(a.Key, a.Fingerprint, bytes.Clone(e.result))}, nil
	case e.leaseUntil > now:
		busy := e.record(a.Key, a.Fingerprint, nil)
		busy.Token = 0 // the holder's token is the holder's alone: it would complete or release its lease
		return storage.Claim{Outcome: storage.Busy, Record: busy}, nil
	}
	// A write from here: the map's key and the expiry queue keep a.Key.
	a.Key = strings.Clone(a.Key)
	if a.MaxAttempts > 0 && int(e.attempt) >= a.MaxAttempts {
		cause := storage.TooManyAttemptsCause()
		if err := s.reserve(0, int64(len(cause))); err != nil {
			return storage.Claim{}, err
		}
		e.status, e.token, e.leaseUntil = storage.StatusFailed, 0, 0
		e.result = cause
		e.expires = now + int64(a.Retention)
		sh.m[a.Key] = e
		s.queueFinished(sh, a.Key, e.expires)
		return storage.Claim{Outcome: storage.Duplicate, Record: e.record(a.Key, a.Fingerprint, bytes.Clone(e.result))}, nil
	}
	e.attempt++
	e.retention = a.Retention
	s.acquire(&e, a, now)
	sh.m[a.Key] = e
	return storage.Claim{Outcome: storage.Acquired, Token: e.token, Record: e.record(a.Key, a.Fingerprint, nil)}, nil
}

func (s *store) acquire(e *entry, a storage.ClaimArgs, now int64) {
	e.capped = a.MaxAttempts > 0
	e.token = storage.Token(s.tokens.Add(1))
	e.leaseUntil = now + int64(a.Lease)
	e.expires = e.leaseUntil + int64(a.Retention)
}

// record returns the entry as a storage.Record with the given fingerprint and
// result slices (the caller's own, or copies).
func (e *entry) record(key string, fingerprint, result []byte) storage.Record {
	r := storage.Record{
		Key:         key,
		Status:      e.status,
		Token:       e.token,
		Attempt:     int(e.attempt),
		Fingerprint: fingerprint,
		Result:      result,
		ExpiresAt:   time.Unix(0, e.expires),
	}
	if e.status == storage.StatusInProgress {
		r.LeaseUntil = time.Unix(0, e.leaseUntil)
	}
	return r
}

// holder returns the key's entry if t is its current token, else
// ErrLeaseLost. The shard is locked; the caller stores the entry back.
func (s *store) holder(sh *shard, key string, t storage.Token, now int64) (entry, error) {
	e, ok := s.live(sh, key, now)
	if !ok || e.status != storage.StatusInProgress || t == 0 || e.token != t {
		return entry{}, storage.ErrLeaseLost
	}
	return e, nil
}

// finish is Complete and Fail: the outcome of claim t.
func (s *store) finish(ctx context.Context, op string, key string, t storage.Token, status storage.Status, result []byte, retention time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if retention <= 0 {
		return fmt.Errorf("memstore: %s: retention %v must be positive", op, retention)
	}
	if len(result) > s.cfg.MaxValueSize {
		return &storage.ValueTooLargeError{Store: "memstore", Size: len(result), Max: s.cfg.MaxValueSize}
	}
	result = bytes.Clone(result)
	for {
		err := s.finishLocked(key, t, status, result, retention)
		if again, err := s.makeRoomFor(err); !again {
			return err
		}
	}
}

// finishLocked is finish under the key's shard's lock.
func (s *store) finishLocked(key string, t storage.Token, status storage.Status, result []byte, retention time.Duration) error {
	return s.withHeld(key, t, func(sh *shard, e entry, now int64) error {
		if err := s.reserve(0, int64(len(result))); err != nil {
			return err
		}
		e.status, e.result, e.leaseUntil = status, result, 0
		e.expires = now + int64(retention)
		sh.m[key] = e
		s.queueFinished(sh, key, e.expires)
		return nil
	})
}

// withHeld runs f, under the lock of key's shard, on key's entry and the
// time now, when claim t holds the key; else it returns
// storage.ErrLeaseLost.
func (s *store) withHeld(key string, t storage.Token, f func(sh *shard, e entry, now int64) error) error {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.cfg.Now().UnixNano()
	e, err := s.holder(sh, key, t, now)
	if err != nil {
		return err
	}
	return f(sh, e, now)
}

// Complete implements [storage.Store.Complete]. The value is copied; one over
// Config.MaxValueSize gets a *storage.ValueTooLargeError.
func (s *Store) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	return s.finish(ctx, "Complete", key, t, storage.StatusCompleted, value, retention)
}

// Fail implements [storage.Store.Fail]. The cause is copied.
func (s *Store) Fail(ctx context.Context, key string, t storage.Token, cause []byte, retention time.Duration) error {
	return s.finish(ctx, "Fail", key, t, storage.StatusFailed, cause, retention)
}

// Release implements [storage.Store.Release].
func (s *Store) Release(ctx context.Context, key string, t storage.Token) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, err := s.holder(sh, key, t, s.cfg.Now().UnixNano())
	if err != nil {
		return err
	}
	e.token, e.leaseUntil = 0, 0
	sh.m[key] = e
	s.queueReleased(sh, key, &e)
	return nil
}

// Extend implements [storage.Store.Extend]. The record's expiry moves with the
// lease, so it stays retained for the claim's retention after the lease.
func (s *Store) Extend(ctx context.Context, key string, t storage.Token, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if lease <= 0 {
		return fmt.Errorf("memstore: Extend: lease %v must be positive", lease)
	}
	return s.withHeld(key, t, func(sh *shard, e entry, now int64) error {
		e.leaseUntil = now + int64(lease)
		e.expires = max(e.expires, e.leaseUntil+int64(e.retention))
		sh.m[key] = e
		return nil
	})
}

// Get implements [storage.Store.Get]; the record's slices are copies.
func (s *Store) Get(ctx context.Context, key string) (storage.Record, error) {
	if err := ctx.Err(); err != nil {
		return storage.Record{}, err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := s.live(sh, key, s.cfg.Now().UnixNano())
	if !ok {
		return storage.Record{}, storage.ErrNotFound
	}
	return e.record(key, bytes.Clone(e.fingerprint()), bytes.Clone(e.result)), nil
}

// Scan implements [storage.Scanner]: one shard at a time, its matching live
// records copied under its lock and handed to fn after it is released, so
// fn may call the Store.
func (s *Store) Scan(ctx context.Context, prefix string, fn func(storage.Record) bool) error {
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return err
		}
		sh := &s.shards[i]
		var recs []storage.Record
		now := s.cfg.Now().UnixNano()
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expires > now && strings.HasPrefix(k, prefix) {
				recs = append(recs, e.record(k, bytes.Clone(e.fingerprint()), bytes.Clone(e.result)))
			}
		}
		sh.mu.Unlock()
		for _, r := range recs {
			if !fn(r) {
				return nil
			}
		}
	}
	return nil
}

// Delete implements [storage.Store.Delete].
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.m[key]; ok {
		s.remove(sh, key, &e)
	}
	return nil
}

// DeleteIf implements [storage.Store.DeleteIf] in one section under the
// key's shard's lock, on the Store's clock (Config.Now).
func (s *Store) DeleteIf(ctx context.Context, key string, status storage.Status, t storage.Token) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := s.live(sh, key, s.cfg.Now().UnixNano())
	switch {
	case !ok:
		return storage.ErrNotFound
	case e.status != status || e.token != t:
		return storage.ErrChanged
	}
	s.remove(sh, key, &e)
	return nil
}

// ClaimBatch implements [storage.Store.ClaimBatch]: each claim as Claim would,
// in order.
func (s *Store) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, a := range args {
		if err := validClaim(a); err != nil {
			return nil, err // before any claim: the batch claimed nothing
		}
	}
	out := make([]storage.Claim, len(args))
	for i, a := range args {
		// An entry's error (ErrKeyReused, ErrFull) is its own: the
		// entries before it are claimed, and their callers must know.
		c, err := s.claim(a)
		c.Err = err
		out[i] = c
	}
	return out, nil
}

// CompleteBatch implements [storage.Store.CompleteBatch]. A value over
// Config.MaxValueSize fails the whole batch with a *storage.ValueTooLargeError
// before anything is written.
func (s *Store) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	for _, c := range cs {
		if len(c.Value) > s.cfg.MaxValueSize {
			return nil, &storage.ValueTooLargeError{Store: "memstore", Size: len(c.Value), Max: s.cfg.MaxValueSize}
		}
	}
	errs := make([]error, len(cs))
	for i, c := range cs {
		// An entry's error (ErrLeaseLost, ErrFull) is its own: the
		// entries before it are stored.
		errs[i] = s.Complete(ctx, c.Key, c.Token, c.Value, c.Retention)
	}
	return errs, nil
}
