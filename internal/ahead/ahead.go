// Package ahead is a Guard's call split in three — claim, run, finish —
// for the consumers that claim the messages waiting in their prefetch
// buffer in one batch before their workers take them, and store the
// outcomes behind the workers in batches.
//
// Package idem implements it for its *Guard, with the machinery of
// Guard.DoBatch (one ClaimBatch, the heartbeat of every key held, one
// operation per key within a claim, one CompleteBatch), and registers it
// at init; a consumer reaches it with [For]. The guarantees are Do's: the
// lease starts at the claim and the heartbeat keeps it while the message
// waits for a worker; a held key is run once ([Held.Run]) or given back
// ([Held.Release]); a value is stored by [Claimer.Complete] before its
// message is acked.
//
// The package is internal: its shape serves the consumers of this
// repository, and imports the standard library only, so that package idem
// may import it.
package ahead

import "context"

// Op is one operation to claim: the arguments of idem.Guard.DoScoped but
// its function.
type Op struct {
	Scope   string
	Key     string
	Payload []byte
}

// Claim is the answer to one [Op] of [Claimer.Claim]. One of three:
//
//   - Held is set: the op's key is claimed. The caller runs the op with
//     Held.Run, or gives the key back with Held.Release, exactly once;
//     the Guard's heartbeat keeps the lease meanwhile.
//   - Later is set: the op is the caller's to run through
//     idem.Guard.DoScoped at its turn: its key is busy and the Guard waits
//     for busy keys (Config.Wait), an earlier op of the same claim has its
//     key (one operation: DoScoped then finds the outcome, or the key
//     busy), or the store failed and the Guard fails open.
//   - Otherwise the op is answered as DoScoped would answer it: a replayed
//     outcome (Replayed, with Value or a permanent error in Err),
//     ErrInProgress, ErrKeyReused, ErrInvalidKey, ErrStoreUnavailable,
//     ErrClosed, or the error of the claim's context.
type Claim struct {
	Held     Held
	Later    bool
	Value    []byte
	Replayed bool
	Err      error
}

// Held is an op whose key a claim holds.
type Held interface {
	// Run runs fn under the op's lease, as DoScoped runs its function: its
	// context carries the token and is cancelled when the lease is lost.
	// A value fn returns is not stored yet: the key stays held, its lease
	// kept, until [Claimer.Complete] stores it. An error is stored (a
	// permanent one: Fail) or the key given back (any other, or a panic,
	// which goes on) before Run returns it as DoScoped would.
	//
	// When the lease was lost while the op waited, or the claim's context
	// ended, Run gives the key back and reports ran false without running
	// fn: the caller runs the op through DoScoped, as if never claimed.
	Run(fn func(ctx context.Context) ([]byte, error)) (value []byte, err error, ran bool)
	// Release gives the key back without running the op: the consumer
	// stops, or lost the message's channel.
	Release()
}

// Claimer claims and completes operations for one Guard.
type Claimer interface {
	// Claim claims the keys of ops in one store round trip
	// (storage.Store.ClaimBatch) and sets claims[i], len(ops) of them, to
	// the answer for ops[i]. ctx is the parent of every held op's context.
	Claim(ctx context.Context, ops []Op, claims []Claim)
	// Complete stores the values that the Runs of held returned, in one
	// store round trip (storage.Store.CompleteBatch), and sets errs[i],
	// len(held) of them, to what DoScoped would have returned for held[i]
	// then: nil, or an error wrapping idem.ErrLeaseLost,
	// ErrStoreUnavailable or ErrValueTooLarge. Every held[i] is then
	// decided: its key is no longer held.
	Complete(held []Held, errs []error)
}

var forGuard func(g any) Claimer

// Register sets how [For] finds a Guard's Claimer. Package idem calls it
// at init.
func Register(f func(g any) Claimer) { forGuard = f }

// For returns the Claimer of g, an *idem.Guard.
func For(g any) Claimer { return forGuard(g) }
