// Package idem turns at-least-once delivery into effectively-once
// processing. A caller names an operation with an idempotency key; for that
// key idem runs the operation to completion at most once while its record
// is retained, never runs it twice in parallel, and gives every later
// duplicate the first outcome back.
//
// A [Guard] does the work over a store ([storage.Store]):
//
//	g, err := idem.New(store, idem.Config{Namespace: "payments"})
//	res, err := g.Do(ctx, msg.ID, msg.Body, func(ctx context.Context) ([]byte, error) {
//		return charge(ctx, msg)
//	})
//
// # Records and their states
//
// A store keeps one record per key:
//
//	absent ──Claim──▶ InProgress(token t1, attempt 1)
//	InProgress, lease live ──Claim──▶ unchanged; Busy
//	InProgress, lease over ──Claim──▶ InProgress(token t2, attempt+1)   takeover after a crash
//	InProgress(t) ──Complete(t, value)──▶ Completed(value)
//	InProgress(t) ──Fail(t, err)──▶ Failed(err)
//	InProgress(t) ──Release(t)──▶ InProgress, lease over (the next Claim takes over at once)
//	InProgress(t) ──Extend(t, d)──▶ lease ends d from now
//	a call with a token that is not the current one ──▶ ErrLeaseLost, record unchanged
//	Completed/Failed ──Claim──▶ unchanged; Duplicate with the outcome
//	fingerprint differs ──Claim──▶ unchanged; ErrKeyReused
//	attempt would exceed MaxAttempts ──Claim──▶ Failed(ErrTooManyAttempts)
//	expiry passed ──▶ absent
//
// Every transition is atomic in the store, and time is the store's clock.
// The token is the lease's fencing token: it is unique for every claim of a
// key, so a holder that stalled past its lease and was taken over cannot
// store an outcome, and business writes that carry the token ([TokenFrom])
// can be refused for a stale holder too.
//
// # What is guaranteed
//
// With every store: at most one live holder per key; no re-run once an
// outcome is stored, while it is retained; stale holders are fenced. A
// process that crashes after its side effect and before the outcome is
// stored leaves a window: the operation runs again once the lease ends,
// unless the side effect is fenced by the token or commits in the same
// database transaction as the record.
//
// The conformance suite in package idemtest holds every store to these
// rules; package memstore is the in-process default store.
//
// # Where to look
//
// This package is for users: the Guard, its Config, its Result and errors.
// A store author implements the contract in package
// [github.com/idemgo/idem/storage] and runs idemtest's suite; an operator's
// tool reads records through it too. Package
// [github.com/idemgo/idem/coalesce] batches the concurrent calls of many
// goroutines into one round trip to a remote store.
package idem
