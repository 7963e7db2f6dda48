package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/storage"
)

var (
	// ErrUnknownFormat: the value stored under a record's Redis key is not a
	// record this package wrote (another format version, another program
	// wrote the key, or the key holds a hash, a list or another type). The
	// value is left as it is, and in a batch the other entries go on. It
	// wraps storage.ErrRefused.
	ErrUnknownFormat = storage.Refusal("redisstore: stored value has an unknown format")

	// ErrInvalidArgs: a store method was called with arguments out of range
	// (a lease or retention that is not positive or longer than 100 years, a
	// fingerprint over 65535 bytes). Nothing was sent to Redis. It wraps
	// storage.ErrRefused.
	ErrInvalidArgs = storage.Refusal("redisstore: invalid arguments")

	// ErrNotReplicated: with Config.WaitReplicas set, the outcome was written
	// on the primary but fewer replicas than asked acknowledged it within
	// Config.WaitTimeout. The record is Completed (or Failed) on the
	// primary; a failover before the replicas catch up may lose it.
	ErrNotReplicated = errors.New("redisstore: outcome not acknowledged by enough replicas")

	// ErrOutOfMemory: Redis refused a write because its used memory is
	// over maxmemory (under the noeviction policy a full Redis refuses
	// writes rather than forget records). Errors that wrap it also wrap
	// storage.ErrStoreUnavailable. A duplicate of a key that holds an outcome
	// is still answered (Duplicate), and a key held by another caller
	// still answers Busy; what needs a write (the claim of a new key or a
	// takeover, Complete, Fail, Release, Extend) fails with it until memory
	// is freed or maxmemory raised.
	ErrOutOfMemory = errors.New("redisstore: Redis is out of memory (used memory over maxmemory) and refuses writes")
)

// EvictionPolicyError is returned by New when a primary's
// maxmemory-policy is not noeviction, or cannot be read, and
// Config.AllowEviction is not set, and wrapped by the errors of Claim and
// ClaimBatch while a check made since finds such a policy (see New):
// every record has a TTL, so any
// volatile-* or allkeys-* policy lets Redis evict records when it is
// full, and a duplicate of an evicted key runs again, with no error
// anywhere.
type EvictionPolicyError struct {
	Addr      string // the primary, as the client names it
	Policy    string // its maxmemory-policy, e.g. "volatile-lru"; "" when its INFO memory reply has none
	MaxMemory int64  // its maxmemory in bytes; 0: no limit yet (it can be set at run time)
}

func (e *EvictionPolicyError) Error() string {
	if e.Policy == "" {
		return fmt.Sprintf("redisstore: the INFO memory reply of %s has no maxmemory_policy, so the store cannot tell whether Redis "+
			"may evict idempotency records; if you made sure its policy is noeviction, set Config.AllowEviction to skip the check", e.Addr)
	}
	limit := "no maxmemory set yet (it can be set at run time)"
	if e.MaxMemory > 0 {
		limit = fmt.Sprintf("maxmemory %d bytes", e.MaxMemory)
	}
	return fmt.Sprintf("redisstore: Redis at %s has maxmemory-policy %s (%s): when full it may evict idempotency records, "+
		"and a duplicate of an evicted key runs again with no error; set maxmemory-policy noeviction, "+
		"or set Config.AllowEviction to accept that risk", e.Addr, e.Policy, limit)
}

// unavailable translates an error of the Redis client, in a call under
// ctx, into one wrapping storage.ErrStoreUnavailable. Standard-library causes
// (context, network, EOF) stay in the chain for errors.Is; go-redis's own
// error values and the server's error replies keep only their text, so no
// go-redis type leaks through the idem API. When ctx has ended its error
// joins the chain: a client with ContextTimeoutEnabled reports the
// context's deadline as its socket's i/o timeout.
func unavailable(ctx context.Context, op string, err error) error {
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded // passed, though the context's timer has not fired yet
	}
	if cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", cerr, err)
	}
	if redis.IsOOMError(err) {
		return fmt.Errorf("redisstore: %s: %w: %w (%s)", op, storage.ErrStoreUnavailable, ErrOutOfMemory, err.Error())
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("redisstore: %s: %w: %w", op, storage.ErrStoreUnavailable, err)
	}
	if _, ok := errors.AsType[redis.Error](err); !ok {
		if _, ok := errors.AsType[net.Error](err); ok {
			return fmt.Errorf("redisstore: %s: %w: %w", op, storage.ErrStoreUnavailable, err)
		}
	}
	return fmt.Errorf("redisstore: %s: %w: %s", op, storage.ErrStoreUnavailable, err.Error())
}

// isNoScript reports whether err is the server's NOSCRIPT reply: the script
// is not in the server's cache, so it did not run.
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
