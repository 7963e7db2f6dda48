package idemamqp

import (
	"errors"
	"time"

	"github.com/idemgo/idem"
)

// The policy every idem adapter shares: a consumer must decide how keys
// are scoped, and the Guard's answer maps to one of three settlements.

// errNoScopeDecision is New's error without WithScope or WithSharedScope.
var errNoScopeDecision = errors.New("idemamqp: New: no scope decision: pass WithScope to key deliveries per tenant or publisher, " +
	"or WithSharedScope if every publisher of the queue is trusted: in one shared key space a publisher that sends " +
	"another tenant's idempotency key gets its message acked as a duplicate without running, or has its own message " +
	"stand in for the other tenant's")

// scopeDecision checks that exactly one scope decision was made.
func scopeDecision(scoped, shared bool) error {
	switch {
	case scoped && shared:
		return errors.New("idemamqp: New: WithScope and WithSharedScope both given: choose one")
	case !scoped && !shared:
		return errNoScopeDecision
	}
	return nil
}

// action is how a delivery is settled.
type action uint8

const (
	actAck        action = iota // the outcome is stored, or was already
	actRetry                    // deliver again after delay
	actDeadLetter               // never deliver again; cause says why
)

// decision is the settlement of one delivery.
type decision struct {
	action action
	delay  time.Duration
	busy   bool // actRetry because another holder has the key
	cause  error
}

// decide maps what Guard.DoScoped returned to a settlement. ran tells
// whether the handler ran in this call: then err is the handler's (or the
// outcome write's), never the claim's.
func decide(err error, ran bool, busyDelay, retryDelay time.Duration) decision {
	switch {
	case err == nil:
		return decision{action: actAck}
	case idem.IsPermanent(err):
		// The handler's permanent error, fresh or replayed, and
		// ErrTooManyAttempts: it fails the same way every time.
		return decision{action: actDeadLetter, cause: err}
	case ran:
		// A retryable error, a panic, a lease lost or an outcome the
		// store did not take: the key is released (or its lease runs
		// out), a later delivery runs it again.
		return decision{action: actRetry, delay: retryDelay, cause: err}
	case errors.Is(err, idem.ErrInProgress):
		return decision{action: actRetry, delay: busyDelay, busy: true, cause: err}
	case errors.Is(err, idem.ErrKeyReused), errors.Is(err, idem.ErrInvalidKey):
		return decision{action: actDeadLetter, cause: err}
	}
	// The store is unavailable, the Guard closed, the consumer stopping.
	return decision{action: actRetry, delay: retryDelay, cause: err}
}
