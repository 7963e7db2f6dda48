package storage

import (
	"context"
	"encoding/binary"
	"time"
)

// Store keeps idempotency records. Every method is one atomic transition of
// the state machine in the package documentation, safe for concurrent use by
// any number of goroutines and processes sharing the store. Time is the
// store's own clock (the server's for a remote store), never the caller's.
//
// Keys are opaque: any bytes, compared byte for byte. A store returns the
// sentinels named below, wrapped or not, and reports any other failure (an
// unreachable server, a timeout) as an error the Guard treats as
// [ErrStoreUnavailable]. Values and results handed to a store belong to it:
// the caller must not modify them afterwards; slices a store returns belong
// to the caller. Claim and ClaimBatch keep nothing of their arguments' Key
// and Fingerprint bytes once they return (what they store, they copy; no
// error they return holds them), because the Guard builds them in buffers it
// reuses: a store that kept them would let one key's bytes turn into
// another's. The Claims they return may hold them. [idemtest]'s conformance
// suite checks every rule here.
//
// A store that wraps another (to count, trace or fail calls) and changes
// what Claim or Complete do must change ClaimBatch and CompleteBatch too:
// the Guard's batches call those alone. [ClaimEach] and [CompleteEach]
// route them through the wrapper's own Claim and Complete.
//
// [idemtest]: https://pkg.go.dev/github.com/idemgo/idem/idemtest
type Store interface {
	// Claim claims the key for a.Lease:
	//   - absent or expired: a new InProgress record, attempt 1 → Acquired;
	//   - fingerprint differs from the record's, in any status → ErrKeyReused;
	//   - InProgress with a live lease → Busy, record unchanged;
	//   - InProgress with its lease over (or released) → Acquired with a new
	//     token and attempt+1, or, when that would exceed a.MaxAttempts,
	//     Failed([TooManyAttemptsCause]) returned as a Duplicate;
	//   - Completed or Failed → Duplicate with the stored outcome.
	// Of any number of concurrent claims of an absent key exactly one is
	// Acquired.
	Claim(ctx context.Context, a ClaimArgs) (Claim, error)

	// Complete stores value as the outcome of the claim t: the record becomes
	// Completed and expires after retention. It returns ErrLeaseLost, and
	// changes nothing, when t is not the key's current token (another claim
	// took over, t was released, the record has an outcome, expired or is
	// absent). A token whose lease ran out is still current until someone
	// takes over.
	Complete(ctx context.Context, key string, t Token, value []byte, retention time.Duration) error

	// Fail stores the encoded permanent error cause (see [EncodeFailure]) as
	// the outcome of the claim t: the record becomes Failed and expires after
	// retention. ErrLeaseLost as for Complete.
	Fail(ctx context.Context, key string, t Token, cause []byte, retention time.Duration) error

	// Release gives up the lease t without an outcome: the next Claim takes
	// over at once (attempt counted), and t is never accepted again.
	// ErrLeaseLost as for Complete.
	Release(ctx context.Context, key string, t Token) error

	// Extend sets the lease of claim t to end lease from now (store clock).
	// ErrLeaseLost as for Complete.
	Extend(ctx context.Context, key string, t Token, lease time.Duration) error

	// Get returns the key's record, or ErrNotFound when there is none (never
	// claimed, expired or deleted). For inspection; the Guard never needs it.
	Get(ctx context.Context, key string) (Record, error)

	// Delete forgets the key's record, whatever its status; a missing key is
	// not an error. The current holder's next call gets ErrLeaseLost.
	Delete(ctx context.Context, key string) error

	// DeleteIf forgets the key's record only if it is still the one the
	// caller read: live (unexpired on the store's clock), with status and
	// token t (the zero token of a released record, or of a record failed
	// by the attempt cap, included). It is one atomic step, so a record
	// taken over (a new token), finished (another status) or deleted and
	// claimed again (a new token) after the read is never deleted: an
	// operator's tool deletes what it showed, never a record a holder
	// took since. It returns nil when it deleted the record; ErrNotFound
	// when the key has no live record; ErrChanged when its record has
	// another status or token. On either error nothing is deleted; a
	// repeated call after a delete gets ErrNotFound. The holder of a
	// deleted record gets ErrLeaseLost on its next call, as after Delete.
	// Of a DeleteIf and any concurrent calls on the key, each sees the
	// record as the other left it. A holder's Extend keeps its token: a
	// lease renewed since the read is not a change here.
	DeleteIf(ctx context.Context, key string, status Status, t Token) error

	// ClaimBatch does what Claim does for each of args and returns one
	// Claim per argument, in the same order. An error of one entry
	// (ErrKeyReused, a record the store cannot read, no room for it) is in
	// that Claim's Err, and the other entries are claimed and answered; the
	// error returned is for the batch as a whole, which then claimed
	// nothing (arguments out of range, the store could not be reached).
	// Two entries for the same key are claimed in order, the second seeing
	// the first. A store that has no batch of its own answers with
	// [ClaimEach]; a store that has one makes it one round trip, or few.
	ClaimBatch(ctx context.Context, args []ClaimArgs) ([]Claim, error)

	// CompleteBatch does what Complete does for each of cs and returns one
	// error per entry (nil, ErrLeaseLost, or another error of that entry
	// alone), in the same order; the error returned is for the batch as a
	// whole. A store that has no batch of its own answers with
	// [CompleteEach].
	CompleteBatch(ctx context.Context, cs []Completion) ([]error, error)

	// MaxValueSize returns the longest value (the value of Complete, the
	// encoded cause of Fail) the store keeps, in bytes, or 0 when it keeps
	// any; a longer one is refused with an error wrapping ErrValueTooLarge
	// (a [*ValueTooLargeError]). The Guard and the adapters ask it, so that
	// an outcome too large to keep is never handed to Complete. It must not
	// change once the store is built.
	MaxValueSize() int
}

// Scanner is implemented by stores that can list their records, for an
// operator's tools (idem stats, idem purge --status): a Scan reads the
// records page by page, and is never on a request's path.
type Scanner interface {
	// Scan calls fn with each live (unexpired) record whose store key
	// starts with prefix ("" for every record; [NamespacePrefix] for a
	// namespace's), in no particular order, until fn returns false, and
	// returns nil then, or ctx's error, or the store's. Each record is
	// seen once; one written or deleted while Scan runs may be seen or
	// not. A record's Result is as Get returns it.
	Scan(ctx context.Context, prefix string, fn func(Record) bool) error
}

// NamespacePrefix returns what every store key of namespace starts with,
// and no store key of another namespace does: the prefix of a
// [Scanner.Scan] over one namespace.
func NamespacePrefix(namespace string) string { return string(appendNamespace(nil, namespace)) }

// SplitStoreKey returns the namespace, scope and key of a store key that
// [ScopedStoreKey] made, and ok false for a string it did not make.
func SplitStoreKey(storeKey string) (namespace, scope, key string, ok bool) {
	rest := storeKey
	var parts [2]string
	for i := range parts {
		n, w := binary.Uvarint([]byte(rest[:min(len(rest), binary.MaxVarintLen64)]))
		if w <= 0 || n > uint64(len(rest)-w) {
			return "", "", "", false
		}
		parts[i], rest = rest[w:w+int(n)], rest[w+int(n):]
	}
	return parts[0], parts[1], rest, true
}

// StoreKey returns the store key of an unscoped key in namespace: what
// [ScopedStoreKey] returns for the empty scope.
func StoreKey(namespace, key string) string { return ScopedStoreKey(namespace, "", key) }

// ScopedStoreKey returns the store key of key in scope (a tenant, a
// principal) in namespace: the namespace's length as a uvarint, the
// namespace, the scope's length as a uvarint, the scope, then the key. No two
// (namespace, scope, key) triples share a store key, whatever bytes they
// hold: namespace "a:b" with key "c" and namespace "a" with key "b:c" are
// different records, and so are scope "a:b" with key "c" and scope "a" with
// key "b:c".
func ScopedStoreKey(namespace, scope, key string) string {
	b := make([]byte, 0, 2*binary.MaxVarintLen64+len(namespace)+len(scope)+len(key))
	return string(appendScoped(appendNamespace(b, namespace), scope, key))
}

// AppendStoreKey appends the store key of key in scope in namespace to
// dst, as [ScopedStoreKey] spells it, and returns the extended slice: for
// executors that build keys in a buffer of their own.
func AppendStoreKey(dst []byte, namespace, scope, key string) []byte {
	return appendScoped(appendNamespace(dst, namespace), scope, key)
}

func appendNamespace(b []byte, namespace string) []byte {
	b = binary.AppendUvarint(b, uint64(len(namespace)))
	return append(b, namespace...)
}

func appendScoped(b []byte, scope, key string) []byte {
	b = binary.AppendUvarint(b, uint64(len(scope)))
	return append(append(b, scope...), key...)
}
