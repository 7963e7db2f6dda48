package consume

import (
	"errors"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/adapter"
)

// This file is where the shared adapter policy (internal/adapter) meets a
// record: its key's errors become the errors the policy knows, and the
// policy's class names the dead letter's reason.

// Decide says what becomes of a record that the Guard (or the TxGuard)
// answered with res and err: internal/adapter's Decide, shared by every
// idem consumer. Its delays are not used: a partition backs off on its own
// (Options.MinBackoff to MaxBackoff).
func Decide(res idem.Result, err error) adapter.Action { return adapter.Decide(res, err) }

// DecideKey says what becomes of a record whose key could not be had:
// run it unguarded (ok false) when the record simply has none and
// unguarded runs were asked for, else the policy's answer to a missing key
// (ErrNoKey) or an invalid one (ErrBadKey): a dead letter.
func DecideKey(keyErr error, unkeyed bool) (a adapter.Action, guarded bool) {
	if unkeyed && errors.Is(keyErr, ErrNoKey) {
		return adapter.Action{}, false
	}
	if errors.Is(keyErr, ErrNoKey) {
		return Decide(idem.Result{}, fmt.Errorf("%w: %w", adapter.ErrKeyMissing, keyErr)), true
	}
	return Decide(idem.Result{}, fmt.Errorf("%w: %w", idem.ErrInvalidKey, keyErr)), true
}

// The reasons of a dead letter, in its reason header: the names the other
// idem consumers use.
const (
	ReasonPermanent       = "permanent"         // the handler's permanent error, stored or replayed
	ReasonTooManyAttempts = "too-many-attempts" // the key failed more than MaxAttempts times
	ReasonMissingKey      = "missing-key"       // the record has no idempotency key
	ReasonInvalidKey      = "invalid-key"       // its key cannot be read, or the Guard refuses it
	ReasonKeyReused       = "key-reused"        // its key was first used with another payload
)

// reason names why a record with the dead-letter action a is a dead letter.
func reason(a adapter.Action) string {
	switch a.Class {
	case adapter.TooManyAttempts:
		return ReasonTooManyAttempts
	case adapter.KeyReused:
		return ReasonKeyReused
	case adapter.InvalidKey:
		if errors.Is(a.Cause, ErrNoKey) {
			return ReasonMissingKey
		}
		return ReasonInvalidKey
	}
	return ReasonPermanent
}
