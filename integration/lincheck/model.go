package lincheck

import (
	"fmt"
	"math"

	"github.com/anishathalye/porcupine"

	"github.com/idemgo/idem/storage"
)

// span is an instant of the store's clock that the checker does not know
// exactly, only that it lies in [lo, hi] (Unix nanoseconds). The store
// reads its own clock once somewhere inside each call, so the checker
// knows a call's instant only as the call's interval, widened by the
// clock tolerance; every lease end and expiry the store computes from it
// is known as an interval too.
//
// The instants of two calls are not ordered by their linearization:
// PostgreSQL takes a statement's time when the statement starts, and a
// statement that waited for a row lock runs after one that started later.
// So the model never assumes a call's instant is after the previous one's;
// it only narrows the unknowns with what each answer reveals.
type span struct{ lo, hi int64 }

// over is the lease of a released record: it ended before any call.
var over = span{math.MinInt64 / 4, math.MinInt64 / 4}

func (s span) add(d int64) span { return span{s.lo + d, s.hi + d} }

// mayBeReached reports whether the instant s may be at or before the call
// at t: whether a lease ending at s may be over, or a record expiring at
// s may be gone, when the call reads the clock.
func (s span) mayBeReached(t span) bool { return s.lo <= t.hi }

// mayBeAhead reports whether s may be after the call at t: the lease still
// live, the record still there.
func (s span) mayBeAhead(t span) bool { return s.hi > t.lo }

// reached narrows s to the call at t having found it passed.
func (s span) reached(t span) span { return span{s.lo, min(s.hi, t.hi)} }

// ahead narrows s to the call at t having found it not yet passed.
func (s span) ahead(t span) span { return span{max(s.lo, t.lo), s.hi} }

// state is one key's record in the model.
type state struct {
	exists  bool
	status  storage.Status
	token   storage.Token // 0 once released or capped
	attempt int
	fp      string
	result  string
	lease   span  // InProgress: when the lease ends
	expiry  span  // when the store forgets the record
	ret     int64 // the claim's retention, ns: Release and Extend use it
}

// step is the state machine of package idem with the store's clock in it:
// the answer of the call in to a key in state s. Where the clock cannot
// tell (the call's interval straddles a lease end or an expiry), either
// answer is allowed, and the one given narrows the unknown instant. The
// answers of the stores differ in a few places the contract leaves open
// (how long a released or extended record is kept); the model allows each
// store's choice there, and nothing else.
func step(s state, in input, o output) (bool, state) {
	t := in.at
	// The record may be gone at the call's instant (never created, or its
	// expiry reached), or may still be there.
	mayBeGone := !s.exists || s.expiry.mayBeReached(t)
	mayBeThere := s.exists && s.expiry.mayBeAhead(t)
	there := s // s, known to be there at the call
	there.expiry = s.expiry.ahead(t)
	gone := s // s, known to be gone at the call
	if s.exists {
		gone.expiry = s.expiry.reached(t)
	}
	switch in.kind {
	case claim, claimOther:
		fp := in.fingerprint()
		if o.err == "" && o.outcome == storage.Acquired && o.attempt == 1 {
			// Only a claim of an absent key is attempt 1; a takeover
			// counts on from the record's attempt.
			if !mayBeGone || o.token == 0 {
				return false, s
			}
			return true, state{exists: true, status: storage.StatusInProgress, token: o.token, attempt: 1, fp: fp,
				lease: t.add(in.lease), expiry: t.add(in.lease + in.ret), ret: in.ret}
		}
		if !mayBeThere {
			return false, s
		}
		s = there
		switch {
		case s.fp != fp:
			return o.err == "reused", s
		case o.err != "":
			return false, s
		case s.status.Done():
			return o.outcome == storage.Duplicate && o.status == s.status && o.result == s.result, s
		}
		leaseMayBeLive := s.token != 0 && s.lease.mayBeAhead(t)
		leaseMayBeOver := s.token == 0 || s.lease.mayBeReached(t)
		switch o.outcome {
		case storage.Busy:
			// A Busy answer carries the holder's record, never a token.
			if !leaseMayBeLive || o.status != storage.StatusInProgress || o.attempt != s.attempt || o.token != 0 {
				return false, s
			}
			s.lease = s.lease.ahead(t)
			return true, s
		case storage.Acquired:
			if !leaseMayBeOver || s.attempt >= maxAttempts || o.attempt != s.attempt+1 || o.token == 0 {
				return false, s
			}
			if s.token != 0 {
				s.lease = s.lease.reached(t)
			}
			n := s
			n.token, n.attempt = o.token, s.attempt+1
			n.lease, n.expiry, n.ret = t.add(in.lease), t.add(in.lease+in.ret), in.ret
			return true, n
		case storage.Duplicate:
			cause := string(storage.TooManyAttemptsCause())
			if !leaseMayBeOver || s.attempt < maxAttempts || o.status != storage.StatusFailed || o.result != cause {
				return false, s
			}
			n := s
			n.status, n.result, n.token, n.lease = storage.StatusFailed, cause, 0, span{}
			n.expiry = t.add(in.ret)
			return true, n
		}
		return false, s
	case complete, fail, release, extend:
		holder := s.exists && s.status == storage.StatusInProgress && s.token != 0 && in.token == s.token
		if o.err == "lost" {
			if !holder {
				return true, s
			}
			// The holder's token is refused only once the record expired.
			return mayBeGone, gone
		}
		if o.err != "" || !holder || !mayBeThere {
			return false, s
		}
		n := there
		switch in.kind {
		case complete, fail:
			n.status, n.result = storage.StatusCompleted, in.value
			if in.kind == fail {
				n.status = storage.StatusFailed
			}
			// Kept the retention from the call; pgstore keeps the claim's
			// expiry when that is later by at most the rest of the lease.
			n.expiry = span{t.lo + in.ret, max(t.hi, n.lease.hi) + in.ret}
			n.lease = span{}
		case release:
			// memstore and pgstore keep the expiry; redisstore keeps the
			// record the claim's retention from the release.
			n.token, n.lease = 0, over
			n.expiry = span{min(n.expiry.lo, t.lo+n.ret), max(n.expiry.hi, t.hi+n.ret)}
		case extend:
			// Kept the claim's retention after the new lease end; memstore
			// and pgstore never shorten the expiry, redisstore sets it.
			n.lease = t.add(in.lease)
			n.expiry = span{t.lo + in.lease + n.ret, max(n.expiry.hi, t.hi+in.lease+n.ret)}
		}
		return true, n
	case get:
		if o.err == "notfound" {
			return mayBeGone, gone
		}
		if o.err != "" || !mayBeThere {
			return false, s
		}
		s = there
		return o.status == s.status && o.token == s.token && o.attempt == s.attempt && o.result == s.result, s
	}
	return false, s
}

var model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(input).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return state{} },
	Step: func(st, in, out any) (bool, any) {
		return step(st.(state), in.(input), out.(output))
	},
	DescribeOperation: func(in, out any) string { return describe(in.(input), out.(output)) },
	DescribeState:     func(st any) string { return describeState(st.(state)) },
}

// describe shows one call and its answer.
func describe(i input, o output) string {
	return fmt.Sprintf("%s(t%d %q) → %v t%d a%d %v %q %s", kindNames[i.kind], i.token, i.value, o.outcome, o.token, o.attempt, o.status, o.result, o.err)
}

func describeState(s state) string {
	if !s.exists {
		return "absent"
	}
	return fmt.Sprintf("%v t%d a%d fp=%s %q lease=%s expiry=%s", s.status, s.token, s.attempt, s.fp, s.result, s.lease, s.expiry)
}

func (s span) String() string {
	if s == over {
		return "over"
	}
	return fmt.Sprintf("[%d, %d]", s.lo, s.hi)
}

// Stats counts what a linearizable history held, as its linearization
// shows: how often the clock decided an answer. A history with long
// leases has zero of every count but Calls.
type Stats struct {
	Calls int
	// Takeovers: claims that took a record over because its lease ran
	// out (not because it was released).
	Takeovers int
	// Recreated: claims of a key whose record had expired.
	Recreated int
	// LateHolders: Complete, Fail, Release or Extend accepted from a
	// holder after its lease had certainly ended, nobody having taken over.
	LateHolders int
	// ExpiredSeen: Get answering ErrNotFound, or a holder's call refused,
	// because the record had expired.
	ExpiredSeen int
}

// Add adds b's counts to a's.
func (a *Stats) Add(b Stats) {
	a.Calls += b.Calls
	a.Takeovers += b.Takeovers
	a.Recreated += b.Recreated
	a.LateHolders += b.LateHolders
	a.ExpiredSeen += b.ExpiredSeen
}

// count replays one key's linearization through the model and counts.
func count(ops []porcupine.Operation) Stats {
	st := Stats{Calls: len(ops)}
	var s state
	for _, op := range ops {
		in, o := op.Input.(input), op.Output.(output)
		_, n := step(s, in, o)
		switch {
		case o.err == "" && o.outcome == storage.Acquired && (in.kind == claim || in.kind == claimOther):
			if o.attempt == 1 && s.exists {
				st.Recreated++
			} else if o.attempt > 1 && s.token != 0 {
				st.Takeovers++
			}
		case o.err == "" && in.kind >= complete && in.kind <= extend:
			if s.lease.hi <= in.at.lo {
				st.LateHolders++
			}
		case s.exists && (in.kind == get && o.err == "notfound" ||
			o.err == "lost" && in.kind != get && s.status == storage.StatusInProgress && s.token == in.token && s.token != 0):
			st.ExpiredSeen++
		}
		s = n
	}
	return st
}
