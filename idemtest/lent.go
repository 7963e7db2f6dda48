package idemtest

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/idemgo/idem/storage"
)

func init() {
	cases = append(cases, suiteCase{"ClaimKeepsNoArgBytes", claimKeepsNoArgBytes})
}

// lentClaim is a claim whose key and fingerprint live in a buffer the
// caller reuses, as a Guard lends them to every store.
type lentClaim struct {
	buf  []byte
	args storage.ClaimArgs
}

func (e *env) lent(a storage.ClaimArgs) *lentClaim {
	n := len(a.Key)
	buf := append([]byte(a.Key), a.Fingerprint...)
	a.Key = unsafe.String(unsafe.SliceData(buf), n)
	a.Fingerprint = buf[n:]
	return &lentClaim{buf: buf, args: a}
}

// reuse writes other's key and fingerprint over the lent bytes, as the
// Guard's next claim would; other's key is as long as the lent one.
func (l *lentClaim) reuse(t *testing.T, other storage.ClaimArgs) {
	t.Helper()
	if len(other.Key) != len(l.args.Key) || len(other.Fingerprint) != len(l.args.Fingerprint) {
		t.Fatalf("reuse: %q is not as long as %q", other.Key, l.args.Key)
	}
	copy(l.buf[copy(l.buf, other.Key):], other.Fingerprint)
}

// claimKeepsNoArgBytes holds a store to the rule of [storage.Store] that
// Claim keeps nothing of its arguments' bytes: a Claim whose key and
// fingerprint bytes are overwritten once it returns (a new key, a takeover
// and a claim over the attempt cap, each a write) leaves its record under
// the key and fingerprint it was claimed with, and none under the bytes
// written over them. A store that kept the bytes would file one key's
// record under another.
func claimKeepsNoArgBytes(t *testing.T, e *env) {
	c := ctx(t)
	// A long lease: no check below may find a lawful takeover instead of
	// the record the lent bytes were claimed for.
	fresh := func(k string) storage.ClaimArgs {
		a := e.args(k, "fp-"+k)
		a.Lease = time.Minute
		return a
	}
	check := func(orig, over storage.ClaimArgs, status storage.Status) {
		t.Helper()
		r := e.getStored(orig.Key)
		if r.Key != orig.Key || r.Status != status || string(r.Fingerprint) != string(orig.Fingerprint) {
			t.Fatalf("Get(%q) after its claim's bytes were reused: %+v, want status %v and fingerprint %q", orig.Key, r, status, orig.Fingerprint)
		}
		if _, err := e.s.Get(c, over.Key); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("Get(%q), the key written over a lent one: %v, want ErrNotFound", over.Key, err)
		}
		if cl, err := e.claim(orig); err == nil && cl.Outcome == storage.Acquired {
			t.Fatalf("Claim(%q) acquired a key whose record is %v", orig.Key, status)
		}
	}

	// A new key.
	l := e.lent(fresh("lent-1"))
	e.mustClaim(l.args, storage.Acquired)
	l.reuse(t, fresh("over-1"))
	check(fresh("lent-1"), fresh("over-1"), storage.StatusInProgress)
	e.mustClaim(fresh("over-1"), storage.Acquired)

	// A takeover of a released lease.
	first := e.mustClaim(fresh("lent-2"), storage.Acquired)
	if err := e.s.Release(c, fresh("lent-2").Key, first.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	l = e.lent(fresh("lent-2"))
	taken := e.mustClaim(l.args, storage.Acquired)
	l.reuse(t, fresh("over-2"))
	check(fresh("lent-2"), fresh("over-2"), storage.StatusInProgress)
	if err := e.s.Complete(c, fresh("lent-2").Key, taken.Token, []byte("done"), time.Minute); err != nil {
		t.Fatalf("Complete after the takeover: %v", err)
	}
	check(fresh("lent-2"), fresh("over-2"), storage.StatusCompleted)

	// A claim over the attempt cap, which stores ErrTooManyAttempts.
	capped := fresh("lent-3")
	capped.MaxAttempts = 1
	first = e.mustClaim(capped, storage.Acquired)
	if err := e.s.Release(c, capped.Key, first.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	l = e.lent(capped)
	e.mustClaim(l.args, storage.Duplicate)
	l.reuse(t, fresh("over-3"))
	check(fresh("lent-3"), fresh("over-3"), storage.StatusFailed)
}
