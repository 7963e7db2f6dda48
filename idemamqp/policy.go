package idemamqp

import (
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/adapter"
)

// The policy every idem consumer shares lives in internal/adapter: the
// scope decision, and what the Guard's answer means for a message (ack,
// retry after a delay, dead-letter). This file maps it onto RabbitMQ's
// settlements.

// scopeThreat completes the shared policy's error for a consumer built
// without a scope decision: for messages the threat is the publishers'.
const scopeThreat = ". For a consumer, keys are chosen by publishers: without a scope, a publisher " +
	"that sends another tenant's key makes this consumer ack that tenant's message as a duplicate " +
	"without handling it, or has its own message stand in for the other's"

// action is how a delivery is settled.
type action uint8

const (
	actAck        action = iota + 1 // the outcome is stored, or was already: basic.ack
	actRetry                        // deliver again after delay: the delay queue, or nack with requeue
	actDeadLetter                   // never deliver again: reject without requeue, or publish and ack
)

// decision is the settlement of one delivery.
type decision struct {
	action action
	delay  time.Duration // actRetry
	busy   bool          // actRetry because another holder has the key
	reason Reason        // actDeadLetter
	cause  error
}

// decide maps the Guard's answer for a delivery to its settlement, with
// this consumer's delays.
func (o *options) decide(res idem.Result, err error) decision {
	a := adapter.Decide(res, err)
	d := decision{cause: a.Cause}
	switch a.Verdict {
	case adapter.Ack:
		d.action = actAck
	case adapter.Retry:
		d.action, d.delay = actRetry, o.retryDelay
		if a.Class == adapter.InProgress {
			d.delay, d.busy = o.busyDelay, true
		}
	default:
		d.action, d.reason = actDeadLetter, reasonOf(a.Class)
	}
	return d
}

// reasonOf names the cause of a dead letter of class c.
func reasonOf(c adapter.Class) Reason {
	switch c {
	case adapter.TooManyAttempts:
		return ReasonTooManyAttempts
	case adapter.KeyReused:
		return ReasonKeyReused
	case adapter.InvalidKey:
		return ReasonInvalidKey
	}
	return ReasonPermanent
}
