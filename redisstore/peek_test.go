package redisstore_test

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// TestClaimAndPeekAgree puts a record in each state a claim can meet and
// asks the three readers of a claim the same question: the read-only peek
// (what a full Redis answers), the plain commands (SET … NX, then GETRANGE,
// decoded by the client) and the claim script. Where the peek answers, the script
// answers the same; where the peek says the key needs a write, the script
// writes (a new key, a takeover, the claim's own token, the attempt cap).
// The plain commands answer every key not in progress, as the script
// does, and leave to the script every key in progress, a value GETRANGE
// cut (a result over the cap: the script answers its length) and an empty
// one (GETRANGE cannot tell it from a key gone).
func TestClaimAndPeekAgree(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	s := newStore(t, c, redisstore.Config{MaxValueSize: 64})
	ctx := ctxT(t)
	const token = storage.Token(7)
	fp := []byte("fingerprint")
	lease, retention := 10*time.Minute, time.Hour
	expires := time.UnixMilli(time.Now().Add(retention).UnixMilli()) // a finished record's, in its value
	rec := func(status storage.Status, attempt int, result string) []byte {
		return redisstore.EncodeRecord(storage.Record{Status: status, Token: token, Attempt: attempt, Fingerprint: fp, Result: []byte(result),
			ExpiresAt: expires}, retention)
	}
	unknownStatus := rec(storage.StatusCompleted, 1, "receipt")
	unknownStatus[1] = 9
	for _, tc := range []struct {
		name       string
		value      []byte        // nil: no record
		hash       bool          // a hash at the key instead
		ttl        time.Duration // the key's
		fp         []byte        // the claim's, fp when nil
		token      storage.Token // the claim's, a fresh one when 0
		cap        int
		needWrite  bool
		inProgress bool // left by the plain commands to the script (in progress, or a value they cannot tell)
	}{
		{name: "new key", needWrite: true},
		{name: "completed", value: rec(storage.StatusCompleted, 1, "receipt"), ttl: retention},
		{name: "failed", value: rec(storage.StatusFailed, 2, "declined"), ttl: retention},
		{name: "held", value: rec(storage.StatusInProgress, 1, ""), ttl: lease + retention, inProgress: true},
		{name: "held, own token", value: rec(storage.StatusInProgress, 1, ""), ttl: lease + retention, token: token, needWrite: true, inProgress: true},
		{name: "held, reused", value: rec(storage.StatusInProgress, 1, ""), ttl: lease + retention, fp: []byte("other")},
		{name: "lapsed", value: rec(storage.StatusInProgress, 1, ""), ttl: retention, needWrite: true, inProgress: true},
		{name: "lapsed at the cap", value: rec(storage.StatusInProgress, 3, ""), ttl: retention, cap: 3, needWrite: true, inProgress: true},
		{name: "reused", value: rec(storage.StatusCompleted, 1, "receipt"), ttl: retention, fp: []byte("other")},
		{name: "unknown format", value: []byte("not a record"), ttl: retention},
		{name: "unknown status", value: unknownStatus, ttl: retention},
		{name: "empty value", value: []byte{}, ttl: retention, inProgress: true},
		{name: "another type", hash: true},
		{name: "result over the cap", value: rec(storage.StatusCompleted, 1, string(make([]byte, 100))), ttl: retention, inProgress: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := storage.ClaimArgs{Key: tc.name, Fingerprint: fp, Lease: lease, Retention: retention, MaxAttempts: tc.cap}
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
			if tc.hash {
				if err := c.HSet(ctx, s.RedisKey(a.Key), "f", "v").Err(); err != nil {
					t.Fatal(err)
				}
			}
			peeked, perr := s.Peek(ctx, a, tok)
			var plained storage.Claim
			var needsScript bool
			var plainErr error
			if tc.value != nil || tc.hash { // SET would claim a key with no record
				plained, needsScript, plainErr = s.PlainClaim(ctx, a, tok)
			}
			claimed, cerr := s.ScriptClaim(ctx, a, tok)
			switch {
			case tc.inProgress && !needsScript:
				t.Errorf("the plain commands answered a key in progress: %+v %v", plained, plainErr)
			case !tc.inProgress && needsScript:
				t.Errorf("the plain commands left a key not in progress to the script")
			case (tc.value != nil || tc.hash) && !needsScript:
				if !reflect.DeepEqual(plained, claimed) {
					t.Errorf("plain %+v\nclaim %+v", plained, claimed)
				}
				if (plainErr == nil) != (cerr == nil) || plainErr != nil && !sameKind(plainErr, cerr) {
					t.Errorf("the plain commands' error %v, the claim's %v", plainErr, cerr)
				}
			}
			if tc.needWrite {
				if !errors.Is(perr, redisstore.ErrOutOfMemory) {
					t.Fatalf("peek: %v %v, want that the key needs a write", peeked.Outcome, perr)
				}
				if cerr != nil || !(claimed.Outcome == storage.Acquired || tc.cap > 0 && claimed.Outcome == storage.Duplicate) {
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

// FuzzPlainClaim stores arbitrary bytes at a key and claims it with the
// plain commands, whose answer the client decodes, then with the claim
// script: the decoder never panics, it leaves to the script only a record
// in progress with the claim's fingerprint, an empty value, or one longer
// than GETRANGE reads (the header, the claim's fingerprint and the cap),
// and every answer it gives is the script's, error for error.
func FuzzPlainClaim(f *testing.F) {
	fp := []byte("fingerprint")
	expires := time.UnixMilli(1795340671542)
	for _, r := range []storage.Record{
		{Status: storage.StatusInProgress, Token: 3, Attempt: 1, Fingerprint: fp},
		{Status: storage.StatusCompleted, Token: 7, Attempt: 2, Fingerprint: fp, Result: []byte("receipt"), ExpiresAt: expires},
		{Status: storage.StatusFailed, Attempt: 9, Fingerprint: fp, Result: storage.TooManyAttemptsCause(), ExpiresAt: expires},
		{Status: storage.StatusCompleted, Token: 7, Attempt: 1, Fingerprint: fp, Result: make([]byte, 100), ExpiresAt: expires},
		{Status: storage.StatusCompleted, Token: 7, Attempt: 1, Fingerprint: []byte("other"), Result: []byte("x"), ExpiresAt: expires},
		{Status: storage.StatusCompleted, Token: 7, Attempt: 1, Fingerprint: fp}, // no expiry
	} {
		f.Add(redisstore.EncodeRecord(r, time.Hour))
	}
	f.Add([]byte{})
	f.Add([]byte("not a record"))
	f.Add(binary.BigEndian.AppendUint16(append([]byte{3, 2}, make([]byte, 20)...), 500))               // the fingerprint runs past the end
	f.Add(append([]byte{3, 0}, make([]byte, 40)...))                                                   // status 0
	f.Add(append(binary.BigEndian.AppendUint16(append([]byte{3, 1}, make([]byte, 20)...), 11), fp...)) // in progress, no retention
	c := sharedClient(f)
	s := newStore(f, c, redisstore.Config{MaxValueSize: 64})
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, v []byte) {
		ctx := ctxT(t)
		a := storage.ClaimArgs{Key: "fuzz-" + strconv.FormatInt(n.Add(1), 10), Fingerprint: fp, Lease: time.Minute, Retention: time.Hour}
		if err := c.Set(ctx, s.RedisKey(a.Key), v, 2*time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		plained, needsScript, plainErr := s.PlainClaim(ctx, a, 99)
		if needsScript {
			// The script's test of a value it knows: version, status, the
			// fingerprint's length (its other fields it reads as they are).
			const header = 24
			inProgress := len(v) >= header && v[0] == 3 && v[1] == byte(storage.StatusInProgress) &&
				string(v[header:min(len(v), header+int(binary.BigEndian.Uint16(v[header-2:])))]) == string(fp) &&
				int(binary.BigEndian.Uint16(v[header-2:])) == len(fp)
			cut := len(v) > header+len(fp)+64 // the store's MaxValueSize
			if !inProgress && len(v) > 0 && !cut {
				t.Fatalf("the plain commands left %x to the script: not a record in progress with the claim's fingerprint", v)
			}
			return
		}
		claimed, cerr := s.ScriptClaim(ctx, a, 99)
		if !reflect.DeepEqual(plained, claimed) {
			t.Errorf("value %x:\nplain %+v\nclaim %+v", v, plained, claimed)
		}
		if (plainErr == nil) != (cerr == nil) || plainErr != nil && !sameKind(plainErr, cerr) {
			t.Errorf("value %x: the plain commands' error %v, the claim's %v", v, plainErr, cerr)
		}
	})
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
