package idem

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgo/idem/storage"
)

// Config configures a [Guard]. The zero value means every default.
type Config struct {
	// Namespace separates the keys of different operations or services that
	// share a store. Default "" (its own namespace, not a wildcard).
	Namespace string

	// Lease is how long a holder may run the operation before another claim
	// may take it over, unless the heartbeat (every Lease/3) extends it.
	// Default 30s; at least 3ms.
	Lease time.Duration

	// Retention is how long a completed outcome is kept and replayed.
	// Default 24h.
	Retention time.Duration

	// FailedRetention is how long a permanent failure is kept and replayed,
	// and how long a record that nobody finished is kept after its lease
	// (so MaxAttempts counts across crashes). Default: Retention.
	FailedRetention time.Duration

	// Wait is how long Do waits for another holder's outcome when the key is
	// in progress, polling with jittered backoff, before it returns
	// ErrInProgress. Default 0: return ErrInProgress at once.
	Wait time.Duration

	// MaxAttempts caps how many times a key is claimed without an outcome
	// (crashes, retryable errors, panics); the claim after the last one
	// stores ErrTooManyAttempts as the key's permanent failure. Default 0: no
	// cap.
	MaxAttempts int

	// Fingerprint appends the fingerprint of payload to dst and returns the
	// extended slice. A later Do with the same key and a different
	// fingerprint gets ErrKeyReused. Default: SHA-256 of the payload.
	Fingerprint func(dst, payload []byte) []byte

	// MaxKeyLen is the longest key accepted, in bytes. Default 255; a key
	// may hold any bytes.
	MaxKeyLen int

	// ValidateKey, when set, is called for every key after the length check;
	// an error it returns is wrapped with ErrInvalidKey. Default: none.
	ValidateKey func(key string) error

	// CacheSize is how many outcomes (Completed or Failed only) the Guard
	// keeps in process memory to answer duplicates without a store round
	// trip; the least recently used goes first. The cache is per process: an
	// admin Delete in the store is not seen here until the entry expires.
	// From 1024 entries up the cache is split in 16 shards, each evicting
	// its own least recently used. Default 0: no cache.
	CacheSize int

	// CacheTTL is the longest an outcome stays in the local cache; an entry
	// never outlives the record's own expiry either. Default 1m.
	CacheTTL time.Duration

	// StoreTimeout bounds each store call the Guard makes on its own: the
	// outcome writes (Complete, Fail, Release), which run detached from the
	// caller's cancellation, and the heartbeat's Extend (which is also
	// bounded by the lease). Claim runs under the caller's context. Default 5s.
	StoreTimeout time.Duration

	// FailOpen runs the operation without idempotency when the store cannot
	// be reached to claim the key, instead of failing with
	// ErrStoreUnavailable. Duplicates may then run twice: only for
	// operations where that is better than not running. Default false.
	FailOpen bool

	// Observer, when set, is called for every step of every Do (claims,
	// outcomes, heartbeats, cache hits, store errors), for metrics and
	// tracing. It runs synchronously on the Do path: keep it fast. A panic
	// of the Observer is recovered, so that it neither leaves a key held
	// nor ends the process; the first is logged at error level.
	Observer Observer

	// Logger receives warnings (store errors, lost leases, fail-open runs)
	// and debug lines. Default: discard.
	Logger *slog.Logger
}

// Defaults of [Config].
const (
	DefaultLease     = 30 * time.Second
	DefaultRetention = 24 * time.Hour
	DefaultMaxKeyLen = 255
	// MaxScopeLen is the longest scope [Guard.DoScoped] accepts, in bytes.
	MaxScopeLen         = 255
	DefaultCacheTTL     = time.Minute
	DefaultStoreTimeout = 5 * time.Second
	minLease            = 3 * time.Millisecond
)

// WithDefaults returns c with every zero field set to its default, or an
// error naming the first field that is out of range. [New] calls it; so
// does any other executor that takes a Config (pgstore's TxGuard), so that
// a Config means the same wherever it is used.
func (c Config) WithDefaults() (Config, error) {
	switch {
	case c.Lease < 0 || (c.Lease > 0 && c.Lease < minLease):
		return c, fmt.Errorf("idem: Config.Lease %v: must be at least %v", c.Lease, minLease)
	case c.Retention < 0:
		return c, fmt.Errorf("idem: Config.Retention %v: must not be negative", c.Retention)
	case c.FailedRetention < 0:
		return c, fmt.Errorf("idem: Config.FailedRetention %v: must not be negative", c.FailedRetention)
	case c.Wait < 0:
		return c, fmt.Errorf("idem: Config.Wait %v: must not be negative", c.Wait)
	case c.MaxAttempts < 0:
		return c, fmt.Errorf("idem: Config.MaxAttempts %d: must not be negative", c.MaxAttempts)
	case c.MaxKeyLen < 0:
		return c, fmt.Errorf("idem: Config.MaxKeyLen %d: must not be negative", c.MaxKeyLen)
	case c.CacheSize < 0:
		return c, fmt.Errorf("idem: Config.CacheSize %d: must not be negative", c.CacheSize)
	case c.CacheTTL < 0:
		return c, fmt.Errorf("idem: Config.CacheTTL %v: must not be negative", c.CacheTTL)
	case c.StoreTimeout < 0:
		return c, fmt.Errorf("idem: Config.StoreTimeout %v: must not be negative", c.StoreTimeout)
	}
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.FailedRetention = cmp.Or(c.FailedRetention, c.Retention)
	c.MaxKeyLen = cmp.Or(c.MaxKeyLen, DefaultMaxKeyLen)
	c.CacheTTL = cmp.Or(c.CacheTTL, DefaultCacheTTL)
	c.StoreTimeout = cmp.Or(c.StoreTimeout, DefaultStoreTimeout)
	if c.Fingerprint == nil {
		c.Fingerprint = SHA256Fingerprint
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// CheckKey returns nil when the Guard accepts key within scope, and else
// an error wrapping ErrInvalidKey that says why: the key is empty or longer
// than MaxKeyLen (the default when unset), ValidateKey refused it, or the
// scope is longer than [MaxScopeLen]. MaxKeyLen and ValidateKey see the key
// alone, never the scope. [Guard.DoScoped] checks every key with it;
// adapters call it to refuse a bad key before they read a request body.
func (c Config) CheckKey(scope, key string) error {
	switch maxLen := cmp.Or(c.MaxKeyLen, DefaultMaxKeyLen); {
	case len(scope) > MaxScopeLen:
		return fmt.Errorf("%w: the scope is %d bytes long, longer than %d", ErrInvalidKey, len(scope), MaxScopeLen)
	case key == "":
		return fmt.Errorf("%w: the key is empty", ErrInvalidKey)
	case len(key) > maxLen:
		return fmt.Errorf("%w: the key is %d bytes long, longer than %d", ErrInvalidKey, len(key), maxLen)
	case c.ValidateKey != nil:
		if err := c.ValidateKey(key); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidKey, err)
		}
	}
	return nil
}

// SHA256Fingerprint is the default [Config.Fingerprint]: it appends the
// SHA-256 of payload to dst.
func SHA256Fingerprint(dst, payload []byte) []byte {
	sum := sha256.Sum256(payload)
	return append(dst, sum[:]...)
}

// Op names a step of [Guard.Do] reported to an [Observer].
type Op uint8

// The steps an [Observer] sees.
const (
	OpClaim     Op = iota + 1 // a storage.Claim answered (Event.Outcome) or failed (Event.Err; ErrKeyReused, or ErrTooManyAttempts for a storage.Duplicate the attempt cap failed)
	OpCacheHit                // a duplicate answered from the local cache (Event.Err ErrKeyReused when its payload differs)
	OpRun                     // the operation ran (Event.Duration; Event.Err is its error)
	OpComplete                // Complete answered
	OpFail                    // Fail answered
	OpRelease                 // Release answered
	OpExtend                  // a heartbeat's Extend answered
	OpLeaseLost               // the operation's context was cancelled: lease lost or not confirmed in time
	OpFailOpen                // the store failed and the operation ran without idempotency
	OpTooLarge                // an outcome too large for the store was kept without it (Event.Err says how)
)

var opNames = [...]string{"", "claim", "cache_hit", "run", "complete", "fail", "release", "extend", "lease_lost", "fail_open", "too_large"}

// String returns the step's name in snake case, for metric labels.
func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Event is one step of a [Guard.Do], reported to an [Observer].
type Event struct {
	Op        Op
	Namespace string
	Scope     string          // the scope given to DoScoped; "" for Do
	Key       string          // the caller's key, not the store key
	Outcome   storage.Outcome // OpClaim
	Attempt   int             // OpClaim when storage.Acquired
	Duration  time.Duration   // how long the step took
	Err       error           // the step's error, if any
}

// Observer receives the [Event]s of a Guard; see [Config.Observer].
type Observer func(ctx context.Context, e Event)

// errLocalDeadline cancels an operation whose lease the heartbeat could not
// confirm before the local safety deadline.
var errLocalDeadline = fmt.Errorf("%w: the store did not confirm the lease before it ends", ErrLeaseLost)

// errDisplaced cancels an operation whose lease the store says is gone.
var errDisplaced = fmt.Errorf("%w: the store no longer holds this lease", ErrLeaseLost)

var errNilFunc = errors.New("idem: Do: fn is nil")
