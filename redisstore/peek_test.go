package redisstore_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
)

// TestClaimAndPeekAgree puts a record in each state a claim can meet and
// asks the read-only peek (what a full Redis answers) and then the claim:
// where the peek answers, the claim answers the same; where the peek says
// the key needs a write, the claim writes (a new key, a takeover, the
// claim's own token, the attempt cap).
func TestClaimAndPeekAgree(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	s := newStore(t, c, redisstore.Config{MaxValueSize: 64})
	ctx := ctxT(t)
	const token = idem.Token(7)
	fp := []byte("fingerprint")
	lease, retention := 10*time.Minute, time.Hour
	rec := func(status idem.Status, attempt int, result string) []byte {
		return redisstore.EncodeRecord(idem.Record{Status: status, Token: token, Attempt: attempt, Fingerprint: fp, Result: []byte(result)}, retention)
	}
	for _, tc := range []struct {
		name      string
		value     []byte        // nil: no record
		ttl       time.Duration // the key's
		fp        []byte        // the claim's, fp when nil
		token     idem.Token    // the claim's, a fresh one when 0
		cap       int
		needWrite bool
	}{
		{name: "new key", needWrite: true},
		{name: "completed", value: rec(idem.StatusCompleted, 1, "receipt"), ttl: retention},
		{name: "failed", value: rec(idem.StatusFailed, 2, "declined"), ttl: retention},
		{name: "held", value: rec(idem.StatusInProgress, 1, ""), ttl: lease + retention},
		{name: "held, own token", value: rec(idem.StatusInProgress, 1, ""), ttl: lease + retention, token: token, needWrite: true},
		{name: "lapsed", value: rec(idem.StatusInProgress, 1, ""), ttl: retention, needWrite: true},
		{name: "lapsed at the cap", value: rec(idem.StatusInProgress, 3, ""), ttl: retention, cap: 3, needWrite: true},
		{name: "reused", value: rec(idem.StatusCompleted, 1, "receipt"), ttl: retention, fp: []byte("other")},
		{name: "unknown format", value: []byte("not a record"), ttl: retention},
		{name: "result over the cap", value: rec(idem.StatusCompleted, 1, string(make([]byte, 100))), ttl: retention},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := idem.ClaimArgs{Key: tc.name, Fingerprint: fp, Lease: lease, Retention: retention, MaxAttempts: tc.cap}
			if tc.fp != nil {
				a.Fingerprint = tc.fp
			}
			tok := tc.token
			if tok == 0 {
				tok = 99
			}
			if tc.value != nil {
				if err := c.Set(ctx, s.RedisKey(a.Key), tc.value, tc.ttl).Err(); err != nil {
					t.Fatal(err)
				}
			}
			peeked, perr := s.Peek(ctx, a, tok)
			claimed, cerr := s.ClaimWithToken(ctx, a, tok)
			if tc.needWrite {
				if !errors.Is(perr, redisstore.ErrOutOfMemory) {
					t.Fatalf("peek: %v %v, want that the key needs a write", peeked.Outcome, perr)
				}
				if cerr != nil || !(claimed.Outcome == idem.Acquired || tc.cap > 0 && claimed.Outcome == idem.Duplicate) {
					t.Fatalf("claim after the peek said it needs a write: %v %v", claimed.Outcome, cerr)
				}
				return
			}
			if !reflect.DeepEqual(peeked, claimed) {
				t.Errorf("peek %+v\nclaim %+v", peeked, claimed)
			}
			if (perr == nil) != (cerr == nil) || perr != nil && !sameKind(perr, cerr) {
				t.Errorf("peek's error %v, claim's %v", perr, cerr)
			}
		})
	}
}

// sameKind reports whether two errors of a claim say the same thing.
func sameKind(a, b error) bool {
	for _, target := range []error{idem.ErrKeyReused, redisstore.ErrUnknownFormat, idem.ErrValueTooLarge} {
		if errors.Is(a, target) != errors.Is(b, target) {
			return false
		}
	}
	return errors.Is(a, idem.ErrKeyReused) || errors.Is(a, redisstore.ErrUnknownFormat) || errors.Is(a, idem.ErrValueTooLarge)
}
