// Package idemtest holds the conformance suite every [storage.Store] runs from
// its own tests, like testing/slogtest for slog handlers:
//
//	func TestConformance(t *testing.T) {
//		idemtest.Run(t, func(t *testing.T) storage.Store { return newStore(t) })
//	}
//
// Each case is a parallel subtest under a namespace of its own, so newStore
// may return one shared store. The suite uses the real clock with leases of
// about 50ms: no case waits longer than a few leases.
package idemtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// Lease is the lease the suite claims with; expiry cases wait a few of them.
const Lease = 50 * time.Millisecond

// Run runs the conformance suite against the stores newStore returns.
func Run(t *testing.T, newStore func(t *testing.T) storage.Store) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newEnv(t, newStore(t)))
		})
	}
}

// suiteCase is one case of the suite.
type suiteCase struct {
	name string
	run  func(t *testing.T, e *env)
}

var cases = []suiteCase{
	{"ConcurrentClaimsOneWinner", concurrentClaims},
	{"GuardRunsOnceUnderConcurrency", guardRunsOnce},
	{"DuplicateGetsValueByteIdentical", duplicateGetsValue},
	{"FailStoresCause", failStoresCause},
	{"BusyWhileLeaseLive", busyWhileLeaseLive},
	{"TakeoverAfterLeaseExpiry", takeoverAfterExpiry},
	{"StaleTokenIsFenced", staleTokenFenced},
	{"LateHolderNotDisplacedMayFinish", lateHolderMayFinish},
	{"OutcomeIsFinal", outcomeIsFinal},
	{"ReleaseLetsNextClaimAcquire", releaseLetsNextAcquire},
	{"ExtendKeepsLeaseAlive", extendKeepsLease},
	{"MaxAttemptsFails", maxAttemptsFails},
	{"RetentionExpiryFreesKey", retentionFreesKey},
	{"RecreatedRecordRefusesOldTokens", recreatedRefusesOldTokens},
	{"FingerprintMismatchInEveryStatus", fingerprintMismatch},
	{"AnyKeyBytesNeverCollide", keysNeverCollide},
	{"LargeValueRoundTrips", largeValue},
	{"ValueOverTheLimitIsRefused", valueOverLimit},
	{"GetAndDelete", getAndDelete},
	{"ClaimBatchAgreesWithClaim", claimBatchAgrees},
	{"CompleteBatchAgreesWithComplete", completeBatchAgrees},
	{"ScanListsLiveRecords", scanListsLiveRecords},
}

// env is one case's view of the store: its own namespace and helpers.
type env struct {
	t  *testing.T
	s  storage.Store
	ns string
}

func newEnv(t *testing.T, s storage.Store) *env {
	var b [8]byte
	rand.Read(b[:])
	return &env{t: t, s: s, ns: "idemtest-" + hex.EncodeToString(b[:])}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// key returns the store key of k in the case's namespace.
func (e *env) key(k string) string { return storage.StoreKey(e.ns, k) }

func (e *env) args(k, fingerprint string) storage.ClaimArgs {
	return storage.ClaimArgs{Key: e.key(k), Fingerprint: []byte(fingerprint), Lease: Lease, Retention: time.Minute}
}

func (e *env) claim(a storage.ClaimArgs) (storage.Claim, error) { return e.s.Claim(ctx(e.t), a) }

func (e *env) mustClaim(a storage.ClaimArgs, want storage.Outcome) storage.Claim {
	e.t.Helper()
	c, err := e.claim(a)
	if err != nil {
		e.t.Fatalf("Claim(%q): %v", a.Key, err)
	}
	if c.Outcome != want {
		e.t.Fatalf("Claim(%q) = %v (record %+v), want %v", a.Key, c.Outcome, c.Record, want)
	}
	if want == storage.Acquired && c.Token == 0 {
		e.t.Fatalf("Claim(%q) acquired with the zero token", a.Key)
	}
	return c
}

// AwaitTimeout bounds the suite's waits for a lease or a record to expire:
// far beyond the 50 ms they take, so that a store slowed down by a loaded
// machine (dynalite under the race detector) is not taken for one that
// never expires.
const AwaitTimeout = 20 * time.Second

// awaitAcquire claims until Acquired: the lease or the record has to expire
// first. It fails after AwaitTimeout. Errors in tolerate may answer while
// it waits.
func (e *env) awaitAcquire(a storage.ClaimArgs, tolerate ...error) storage.Claim {
	e.t.Helper()
	deadline := time.Now().Add(AwaitTimeout)
	for {
		c, err := e.claim(a)
		for _, ok := range tolerate {
			if errors.Is(err, ok) {
				c, err = storage.Claim{Outcome: storage.Busy}, nil
			}
		}
		if err != nil {
			e.t.Fatalf("Claim(%q): %v", a.Key, err)
		}
		if c.Outcome == storage.Acquired {
			return c
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("Claim(%q) still %v after %v: the lease or record never expired", a.Key, c.Outcome, AwaitTimeout)
		}
		time.Sleep(Lease / 5)
	}
}

func (e *env) get(k string) storage.Record {
	e.t.Helper()
	return e.getStored(e.key(k))
}

// getStored returns the record of the store key.
func (e *env) getStored(key string) storage.Record {
	e.t.Helper()
	r, err := e.s.Get(ctx(e.t), key)
	if err != nil {
		e.t.Fatalf("Get(%q): %v", key, err)
	}
	return r
}

// sameRecord reports a difference of two reads of one record, ignoring
// nothing the state machine defines.
func sameRecord(a, b storage.Record) bool {
	return a.Key == b.Key && a.Status == b.Status && a.Token == b.Token && a.Attempt == b.Attempt &&
		bytes.Equal(a.Fingerprint, b.Fingerprint) && bytes.Equal(a.Result, b.Result) &&
		a.LeaseUntil.Equal(b.LeaseUntil) && a.ExpiresAt.Equal(b.ExpiresAt)
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func concurrentClaims(t *testing.T, e *env) {
	const n = 64
	a := e.args("k", "fp")
	a.Lease = time.Minute // no takeover during the race
	var acquired, busy atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			c, err := e.s.Claim(context.Background(), a)
			switch {
			case err != nil:
				t.Errorf("Claim: %v", err)
			case c.Outcome == storage.Acquired:
				acquired.Add(1)
			case c.Outcome == storage.Busy:
				busy.Add(1)
			default:
				t.Errorf("Claim = %v, want Acquired or Busy", c.Outcome)
			}
		})
	}
	close(start)
	wg.Wait()
	if acquired.Load() != 1 || busy.Load() != n-1 {
		t.Fatalf("%d concurrent claims: %d Acquired, %d Busy; want 1 and %d", n, acquired.Load(), busy.Load(), n-1)
	}
}

func guardRunsOnce(t *testing.T, e *env) {
	const n = 64
	g, err := idem.New(e.s, idem.Config{Namespace: e.ns, Lease: time.Second, Wait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	var runs atomic.Int32
	var fresh atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			res, err := g.Do(context.Background(), "order-1", []byte("charge 10"), func(ctx context.Context) ([]byte, error) {
				runs.Add(1)
				time.Sleep(Lease / 2) // hold the key while the others arrive
				return []byte("charged"), nil
			})
			if err != nil {
				t.Errorf("Do: %v", err)
				return
			}
			if string(res.Value) != "charged" {
				t.Errorf("Do = %q, want %q", res.Value, "charged")
			}
			if !res.Replayed {
				fresh.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if runs.Load() != 1 || fresh.Load() != 1 {
		t.Fatalf("%d concurrent Do: fn ran %d times, %d fresh results; want 1 and 1", n, runs.Load(), fresh.Load())
	}
}

func duplicateGetsValue(t *testing.T, e *env) {
	a := e.args("k", "fp")
	c := e.mustClaim(a, storage.Acquired)
	if c.Record.Attempt != 1 || c.Record.Status != storage.StatusInProgress {
		t.Fatalf("first claim: record %+v, want InProgress attempt 1", c.Record)
	}
	value := []byte{0, 1, 2, 0xff, 0xfe, 'o', 'k', 0}
	if err := e.s.Complete(ctx(t), a.Key, c.Token, value, time.Minute); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	for range 3 {
		d := e.mustClaim(a, storage.Duplicate)
		if d.Record.Status != storage.StatusCompleted || !bytes.Equal(d.Record.Result, value) {
			t.Fatalf("duplicate: %v %q, want Completed %q", d.Record.Status, d.Record.Result, value)
		}
		d.Record.Result[0] = 'X' // the caller owns what it got
	}
	if r := e.get("k"); !bytes.Equal(r.Result, value) {
		t.Fatalf("Get after duplicates = %q, want %q", r.Result, value)
	}
}

func failStoresCause(t *testing.T, e *env) {
	a := e.args("k", "fp")
	c := e.mustClaim(a, storage.Acquired)
	cause := storage.EncodeFailure(errors.New("card declined"))
	if err := e.s.Fail(ctx(t), a.Key, c.Token, cause, time.Minute); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	d := e.mustClaim(a, storage.Duplicate)
	if d.Record.Status != storage.StatusFailed || !bytes.Equal(d.Record.Result, cause) {
		t.Fatalf("duplicate: %v %q, want Failed %q", d.Record.Status, d.Record.Result, cause)
	}
	if err := storage.DecodeFailure(d.Record.Result); err.Error() != "card declined" {
		t.Fatalf("decoded failure %v, want the permanent error %q", err, "card declined")
	}
}

func busyWhileLeaseLive(t *testing.T, e *env) {
	a := e.args("k", "fp")
	a.Lease = time.Minute
	c := e.mustClaim(a, storage.Acquired)
	b := e.mustClaim(a, storage.Busy)
	if b.Record.Attempt != 1 || b.Record.Status != storage.StatusInProgress || !bytes.Equal(b.Record.Fingerprint, a.Fingerprint) {
		t.Fatalf("busy record %+v, want the holder's (InProgress, attempt 1)", b.Record)
	}
	checkBusyHasNoToken(t, e, a.Key, b, c.Token)
}

// checkBusyHasNoToken checks that the Busy claim b, of key held with the
// token holder, hands out no token: whoever gets a Busy answer must not be
// able to complete, fail, release or extend the holder's lease.
func checkBusyHasNoToken(t *testing.T, e *env, key string, b storage.Claim, holder storage.Token) {
	t.Helper()
	if b.Token != 0 || b.Record.Token != 0 {
		t.Fatalf("a Busy claim carries token %d and record token %d (the holder's is %d), want none", b.Token, b.Record.Token, holder)
	}
	before := e.getStored(key)
	c := ctx(t)
	for _, tok := range []storage.Token{b.Token, b.Record.Token} {
		wantErr(t, "Complete with a Busy answer's token", e.s.Complete(c, key, tok, []byte("stolen"), time.Minute), idem.ErrLeaseLost)
		wantErr(t, "Release with a Busy answer's token", e.s.Release(c, key, tok), idem.ErrLeaseLost)
		wantErr(t, "Extend with a Busy answer's token", e.s.Extend(c, key, tok, time.Minute), idem.ErrLeaseLost)
	}
	if after := e.getStored(key); !sameRecord(before, after) || after.Token != holder {
		t.Fatalf("the holder's record changed after a Busy answer's calls:\nbefore %+v\nafter  %+v", before, after)
	}
}

func takeoverAfterExpiry(t *testing.T, e *env) {
	a := e.args("k", "fp")
	first := e.mustClaim(a, storage.Acquired)
	second := e.awaitAcquire(a)
	if second.Token == first.Token {
		t.Fatalf("takeover reused token %d", first.Token)
	}
	if second.Record.Attempt != 2 {
		t.Fatalf("takeover attempt %d, want 2", second.Record.Attempt)
	}
	if err := e.s.Complete(ctx(t), a.Key, second.Token, []byte("v2"), time.Minute); err != nil {
		t.Fatalf("new holder's Complete: %v", err)
	}
}

func staleTokenFenced(t *testing.T, e *env) {
	a := e.args("k", "fp")
	old := e.mustClaim(a, storage.Acquired)
	cur := e.awaitAcquire(a)
	before := e.get("k")
	c := ctx(t)
	wantErr(t, "stale Complete", e.s.Complete(c, a.Key, old.Token, []byte("stale"), time.Minute), idem.ErrLeaseLost)
	wantErr(t, "stale Fail", e.s.Fail(c, a.Key, old.Token, storage.EncodeFailure(errors.New("x")), time.Minute), idem.ErrLeaseLost)
	wantErr(t, "stale Release", e.s.Release(c, a.Key, old.Token), idem.ErrLeaseLost)
	wantErr(t, "stale Extend", e.s.Extend(c, a.Key, old.Token, time.Minute), idem.ErrLeaseLost)
	wantErr(t, "zero-token Complete", e.s.Complete(c, a.Key, 0, []byte("zero"), time.Minute), idem.ErrLeaseLost)
	if after := e.get("k"); !sameRecord(before, after) {
		t.Fatalf("stale calls changed the record:\nbefore %+v\nafter  %+v", before, after)
	}
	if err := e.s.Complete(c, a.Key, cur.Token, []byte("current"), time.Minute); err != nil {
		t.Fatalf("current holder's Complete: %v", err)
	}
	if d := e.mustClaim(a, storage.Duplicate); string(d.Record.Result) != "current" {
		t.Fatalf("outcome %q, want the current holder's %q", d.Record.Result, "current")
	}
}

func lateHolderMayFinish(t *testing.T, e *env) {
	a := e.args("k", "fp")
	c := e.mustClaim(a, storage.Acquired)
	time.Sleep(2 * Lease) // the lease ends; nobody claims
	if err := e.s.Complete(ctx(t), a.Key, c.Token, []byte("late"), time.Minute); err != nil {
		t.Fatalf("Complete by a late holder nobody displaced: %v", err)
	}
	if d := e.mustClaim(a, storage.Duplicate); string(d.Record.Result) != "late" {
		t.Fatalf("outcome %q, want %q", d.Record.Result, "late")
	}
}

// outcomes are the two ways a record finishes, for the cases that check
// both: the key each uses, and whether it fails.
var outcomes = []struct {
	key  string
	fail bool
}{{"completed", false}, {"failed", true}}

// finish claims k and stores value as its outcome, Failed when fail, else
// Completed, and returns the claim and its arguments.
func (e *env) finish(k string, fail bool, value []byte) (storage.ClaimArgs, storage.Claim) {
	e.t.Helper()
	a := e.args(k, "fp")
	c := e.mustClaim(a, storage.Acquired)
	var err error
	if fail {
		err = e.s.Fail(ctx(e.t), a.Key, c.Token, value, time.Minute)
	} else {
		err = e.s.Complete(ctx(e.t), a.Key, c.Token, value, time.Minute)
	}
	if err != nil {
		e.t.Fatalf("%s: storing %d bytes as the outcome: %v", k, len(value), err)
	}
	return a, c
}

func outcomeIsFinal(t *testing.T, e *env) {
	for _, o := range outcomes {
		k := o.key
		value := []byte("yes")
		if o.fail {
			value = storage.EncodeFailure(errors.New("no"))
		}
		a, c := e.finish(k, o.fail, value)
		cx := ctx(t)
		before := e.get(k)
		wantErr(t, k+": Complete again", e.s.Complete(cx, a.Key, c.Token, []byte("again"), time.Minute), idem.ErrLeaseLost)
		wantErr(t, k+": Fail again", e.s.Fail(cx, a.Key, c.Token, []byte("again"), time.Minute), idem.ErrLeaseLost)
		wantErr(t, k+": Release", e.s.Release(cx, a.Key, c.Token), idem.ErrLeaseLost)
		wantErr(t, k+": Extend", e.s.Extend(cx, a.Key, c.Token, time.Minute), idem.ErrLeaseLost)
		if after := e.get(k); !sameRecord(before, after) {
			t.Fatalf("%s: calls on an outcome changed it:\nbefore %+v\nafter  %+v", k, before, after)
		}
		time.Sleep(2 * Lease) // an outcome has no lease to expire
		e.mustClaim(a, storage.Duplicate)
	}
}

func releaseLetsNextAcquire(t *testing.T, e *env) {
	a := e.args("k", "fp")
	a.Lease = time.Minute
	first := e.mustClaim(a, storage.Acquired)
	if err := e.s.Release(ctx(t), a.Key, first.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantErr(t, "Complete with the released token", e.s.Complete(ctx(t), a.Key, first.Token, []byte("x"), time.Minute), idem.ErrLeaseLost)
	wantErr(t, "Extend with the released token", e.s.Extend(ctx(t), a.Key, first.Token, time.Minute), idem.ErrLeaseLost)
	wantErr(t, "Release again", e.s.Release(ctx(t), a.Key, first.Token), idem.ErrLeaseLost)
	next := e.mustClaim(a, storage.Acquired) // at once, not after the minute's lease
	if next.Token == first.Token || next.Record.Attempt != 2 {
		t.Fatalf("claim after Release: token %d attempt %d, want a new token and attempt 2", next.Token, next.Record.Attempt)
	}
	wantErr(t, "Complete with the released token after takeover", e.s.Complete(ctx(t), a.Key, first.Token, []byte("x"), time.Minute), idem.ErrLeaseLost)
}

// extendKeepsLease: a holder that extends its lease keeps the key past
// the lease it claimed with. The claim's lease is the suite's short one and
// the extension a minute, so nothing here bets on a round trip's length: an
// Extend that arrives after the first lease ended still holds (nobody else
// claimed; a late holder nobody displaced may go on), and a minute is far
// beyond the sleep that follows.
func extendKeepsLease(t *testing.T, e *env) {
	a := e.args("k", "fp")
	c := e.mustClaim(a, storage.Acquired)
	if err := e.s.Extend(ctx(t), a.Key, c.Token, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	time.Sleep(3 * Lease) // the lease claimed with is over; the extension is not
	e.mustClaim(a, storage.Busy)
	if r := e.get("k"); r.Token != c.Token || !r.LeaseUntil.After(time.Now().Add(30*time.Second)) {
		t.Fatalf("record after Extend(1m): token %d lease until %v, want token %d and a lease a minute ahead", r.Token, r.LeaseUntil, c.Token)
	}
	// Extend sets the lease, it does not only lengthen it: cut back to the
	// suite's lease, the key is taken over once that ends.
	if err := e.s.Extend(ctx(t), a.Key, c.Token, Lease); err != nil {
		t.Fatalf("Extend back to %v: %v", Lease, err)
	}
	next := e.awaitAcquire(a)
	if next.Token == c.Token {
		t.Fatalf("takeover after the extension was cut back reused token %d", c.Token)
	}
	wantErr(t, "the displaced holder's Complete", e.s.Complete(ctx(t), a.Key, c.Token, []byte("done"), time.Minute), idem.ErrLeaseLost)
}

func maxAttemptsFails(t *testing.T, e *env) {
	a := e.args("k", "fp")
	a.MaxAttempts = 3
	a.Lease = time.Minute
	for i := 1; i <= 3; i++ {
		c := e.mustClaim(a, storage.Acquired)
		if c.Record.Attempt != i {
			t.Fatalf("claim %d: attempt %d", i, c.Record.Attempt)
		}
		if err := e.s.Release(ctx(t), a.Key, c.Token); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	d := e.mustClaim(a, storage.Duplicate)
	if d.Record.Status != storage.StatusFailed {
		t.Fatalf("claim 4 with MaxAttempts 3: %v, want Failed", d.Record.Status)
	}
	if err := storage.DecodeFailure(d.Record.Result); !errors.Is(err, idem.ErrTooManyAttempts) {
		t.Fatalf("stored failure %v, want ErrTooManyAttempts", err)
	}
	if r := e.get("k"); r.Status != storage.StatusFailed {
		t.Fatalf("record %v after the cap, want Failed", r.Status)
	}
	e.mustClaim(a, storage.Duplicate)
}

func retentionFreesKey(t *testing.T, e *env) {
	a := e.args("k", "fp")
	c := e.mustClaim(a, storage.Acquired)
	stored := time.Now()
	if err := e.s.Complete(ctx(t), a.Key, c.Token, []byte("v"), 2*Lease); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	// Within its retention the outcome answers; a loaded machine may take
	// longer than the retention to ask, and then nothing is asserted.
	again, err := e.claim(a)
	if err != nil {
		t.Fatalf("Claim(%q): %v", a.Key, err)
	}
	if again.Outcome != storage.Duplicate && time.Since(stored) < 2*Lease {
		t.Fatalf("Claim(%q) within the outcome's retention = %v, want Duplicate", a.Key, again.Outcome)
	}
	if again.Outcome != storage.Acquired {
		again = e.awaitAcquire(a)
	}
	if again.Record.Attempt != 1 {
		t.Fatalf("claim after retention: attempt %d, want 1 (a new record)", again.Record.Attempt)
	}
	// A record that expired is forgotten: a new payload may use the key.
	b := e.args("other", "fp")
	c = e.mustClaim(b, storage.Acquired)
	if err := e.s.Complete(ctx(t), b.Key, c.Token, []byte("v"), 2*Lease); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	b.Fingerprint = []byte("another payload")
	e.awaitAcquire(b, idem.ErrKeyReused)
}

func recreatedRefusesOldTokens(t *testing.T, e *env) {
	a := e.args("k", "fp")
	seen := map[storage.Token]bool{}
	var old []storage.Token
	for range 4 {
		c := e.awaitAcquire(a)
		if seen[c.Token] {
			t.Fatalf("token %d issued twice for one key", c.Token)
		}
		seen[c.Token] = true
		for _, o := range old {
			wantErr(t, "Complete with a token from before the record expired",
				e.s.Complete(ctx(t), a.Key, o, []byte("old"), time.Minute), idem.ErrLeaseLost)
			wantErr(t, "Extend with a token from before", e.s.Extend(ctx(t), a.Key, o, time.Minute), idem.ErrLeaseLost)
		}
		old = append(old, c.Token)
		// Let the record expire entirely: complete with a short retention.
		if err := e.s.Complete(ctx(t), a.Key, c.Token, []byte("v"), Lease); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
}

func fingerprintMismatch(t *testing.T, e *env) {
	a := e.args("k", "fp")
	a.Lease = time.Minute
	other := a
	other.Fingerprint = []byte("fp2")
	c := e.mustClaim(a, storage.Acquired)
	check := func(status string) {
		t.Helper()
		before := e.get("k")
		_, err := e.claim(other)
		wantErr(t, "claim with another fingerprint ("+status+")", err, idem.ErrKeyReused)
		if after := e.get("k"); !sameRecord(before, after) {
			t.Fatalf("%s: a mismatched claim changed the record", status)
		}
	}
	check("in progress")
	if err := e.s.Release(ctx(t), a.Key, c.Token); err != nil {
		t.Fatal(err)
	}
	check("released, lease over") // before takeover is considered
	c = e.mustClaim(a, storage.Acquired)
	if err := e.s.Complete(ctx(t), a.Key, c.Token, []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	check("completed")

	f := e.args("f", "fp")
	c = e.mustClaim(f, storage.Acquired)
	if err := e.s.Fail(ctx(t), f.Key, c.Token, storage.EncodeFailure(errors.New("no")), time.Minute); err != nil {
		t.Fatal(err)
	}
	f.Fingerprint = []byte("fp2")
	_, err := e.claim(f)
	wantErr(t, "claim with another fingerprint (failed)", err, idem.ErrKeyReused)

	// Fingerprints compare byte for byte: a prefix is another fingerprint.
	p := e.args("p", "abc")
	e.mustClaim(p, storage.Acquired)
	p.Fingerprint = []byte("ab")
	_, err = e.claim(p)
	wantErr(t, "claim with a prefix of the fingerprint", err, idem.ErrKeyReused)
}

func keysNeverCollide(t *testing.T, e *env) {
	long := string(bytes.Repeat([]byte{0xfe}, 255))
	keys := []struct{ ns, key string }{
		{"a:b", "c"}, {"a", "b:c"}, {"a", "b"}, {"", "ab"}, {"ab", ""},
		{e.ns, "{tag}"}, {e.ns, "{tag"}, {e.ns, "tag}"}, {e.ns, "\x00"}, {e.ns, "\x00\x00"},
		{e.ns, "\xff\xfe\xfd"}, {e.ns, "k\x00v"}, {e.ns, "k"}, {e.ns, "K"}, {e.ns, long},
		{e.ns, long[:254]}, {e.ns, "ключ"}, {e.ns, " k"}, {e.ns, "k "}, {e.ns, "*"}, {e.ns, "?"}, {e.ns, "%s"},
	}
	c := ctx(t)
	tokens := map[string]storage.Token{}
	for i, k := range keys {
		// Scope even the literal namespaces to this run.
		sk := storage.StoreKey(e.ns+"/"+k.ns, k.key)
		if _, dup := tokens[sk]; dup {
			t.Fatalf("StoreKey collision for %q/%q", k.ns, k.key)
		}
		cl, err := e.s.Claim(c, storage.ClaimArgs{Key: sk, Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Minute})
		if err != nil || cl.Outcome != storage.Acquired {
			t.Fatalf("key %d (%q/%q): %v %v, want Acquired: another key's record answered", i, k.ns, k.key, cl.Outcome, err)
		}
		tokens[sk] = cl.Token
	}
	for i, k := range keys {
		sk := storage.StoreKey(e.ns+"/"+k.ns, k.key)
		v := []byte{byte(i)}
		if err := e.s.Complete(c, sk, tokens[sk], v, time.Minute); err != nil {
			t.Fatalf("Complete key %d: %v", i, err)
		}
	}
	for i, k := range keys {
		sk := storage.StoreKey(e.ns+"/"+k.ns, k.key)
		r, err := e.s.Get(c, sk)
		if err != nil || r.Key != sk || !bytes.Equal(r.Result, []byte{byte(i)}) {
			t.Fatalf("key %d (%q/%q): record %q %q %v, want its own value %d", i, k.ns, k.key, r.Key, r.Result, err, i)
		}
	}
}

func largeValue(t *testing.T, e *env) {
	n := 1 << 20
	if l := e.s.MaxValueSize(); l > 0 {
		n = min(n, l)
	}
	value := make([]byte, n)
	rand.Read(value)
	a := e.args("k", "fp")
	c := e.mustClaim(a, storage.Acquired)
	if err := e.s.Complete(ctx(t), a.Key, c.Token, value, time.Minute); err != nil {
		t.Fatalf("Complete with %d bytes: %v", n, err)
	}
	d := e.mustClaim(a, storage.Duplicate)
	if !bytes.Equal(d.Record.Result, value) {
		t.Fatalf("a value of %d bytes came back as %d different bytes", n, len(d.Record.Result))
	}
}

// valueOverLimit holds a store that states its value limit to it
// (storage.Store.MaxValueSize): a value or cause one byte longer is refused with an
// error wrapping idem.ErrValueTooLarge and changes nothing, one of exactly
// the limit is stored and read back.
func valueOverLimit(t *testing.T, e *env) {
	limit := e.s.MaxValueSize()
	if limit == 0 {
		t.Skip("the store keeps values of any size (MaxValueSize 0)")
	}
	if limit < 0 || limit > 64<<20 {
		t.Fatalf("MaxValueSize() = %d, want a positive limit the suite can fill (at most 64 MiB)", limit)
	}
	a := e.args("k", "fp")
	a.Lease = time.Minute
	c := e.mustClaim(a, storage.Acquired)
	before := e.get("k")
	cx := ctx(t)
	over := make([]byte, limit+1)
	for what, err := range map[string]error{
		"Complete": e.s.Complete(cx, a.Key, c.Token, over, time.Minute),
		"Fail":     e.s.Fail(cx, a.Key, c.Token, over, time.Minute),
	} {
		if !errors.Is(err, idem.ErrValueTooLarge) {
			t.Fatalf("%s with %d bytes, over MaxValueSize %d: error %v, want one wrapping idem.ErrValueTooLarge", what, len(over), limit, err)
		}
	}
	{
		errs, err := e.s.CompleteBatch(cx, []storage.Completion{{Key: a.Key, Token: c.Token, Value: over, Retention: time.Minute}})
		if err == nil && (len(errs) != 1 || !errors.Is(errs[0], idem.ErrValueTooLarge)) {
			t.Fatalf("CompleteBatch with %d bytes, over MaxValueSize %d: %v, want a refusal wrapping idem.ErrValueTooLarge", len(over), limit, errs)
		}
		if err != nil && !errors.Is(err, idem.ErrValueTooLarge) {
			t.Fatalf("CompleteBatch with %d bytes, over MaxValueSize %d: %v, want an error wrapping idem.ErrValueTooLarge", len(over), limit, err)
		}
	}
	if after := e.get("k"); !sameRecord(before, after) {
		t.Fatalf("refused values changed the record:\nbefore %+v\nafter  %+v", before, after)
	}
	value := over[:limit]
	value[0], value[limit-1] = 'a', 'z'
	if err := e.s.Complete(cx, a.Key, c.Token, value, time.Minute); err != nil {
		t.Fatalf("Complete with MaxValueSize (%d) bytes: %v", limit, err)
	}
	if d := e.mustClaim(a, storage.Duplicate); !bytes.Equal(d.Record.Result, value) {
		t.Fatalf("a value of MaxValueSize bytes came back as %d different bytes", len(d.Record.Result))
	}
}

func getAndDelete(t *testing.T, e *env) {
	c := ctx(t)
	if _, err := e.s.Get(c, e.key("missing")); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	if err := e.s.Delete(c, e.key("missing")); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	a := e.args("k", "fp")
	a.Lease = time.Minute
	cl := e.mustClaim(a, storage.Acquired)
	r := e.get("k")
	if r.Key != a.Key || r.Status != storage.StatusInProgress || r.Token != cl.Token || r.Attempt != 1 ||
		!bytes.Equal(r.Fingerprint, a.Fingerprint) || !r.LeaseUntil.After(time.Now().Add(-time.Minute)) ||
		!r.ExpiresAt.After(r.LeaseUntil.Add(-time.Second)) {
		t.Fatalf("Get = %+v, want the claim's InProgress record", r)
	}
	if err := e.s.Delete(c, a.Key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := e.s.Get(c, a.Key); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	wantErr(t, "Complete after Delete", e.s.Complete(c, a.Key, cl.Token, []byte("v"), time.Minute), idem.ErrLeaseLost)
	next := e.mustClaim(a, storage.Acquired)
	if next.Token == cl.Token || next.Record.Attempt != 1 {
		t.Fatalf("claim after Delete: token %d attempt %d, want a new token, attempt 1", next.Token, next.Record.Attempt)
	}
}

func claimBatchAgrees(t *testing.T, e *env) {
	bc := e.s
	c := ctx(t)
	// Set up: "done" completed, "busy" in progress, "reused" completed with another fingerprint.
	done := e.args("done", "fp")
	cl := e.mustClaim(done, storage.Acquired)
	if err := e.s.Complete(c, done.Key, cl.Token, []byte("done-value"), time.Minute); err != nil {
		t.Fatal(err)
	}
	busy := e.args("busy", "fp")
	busy.Lease = time.Minute
	holder := e.mustClaim(busy, storage.Acquired)
	reused := e.args("reused", "other")
	cl = e.mustClaim(reused, storage.Acquired)
	if err := e.s.Complete(c, reused.Key, cl.Token, []byte("r"), time.Minute); err != nil {
		t.Fatal(err)
	}
	reused.Fingerprint = []byte("fp")
	fresh := e.args("fresh", "fp")
	fresh.Lease = time.Minute
	args := []storage.ClaimArgs{fresh, done, busy, reused, fresh}
	got, err := bc.ClaimBatch(c, args)
	if err != nil {
		t.Fatalf("ClaimBatch: %v", err)
	}
	if len(got) != len(args) {
		t.Fatalf("ClaimBatch returned %d claims for %d args", len(got), len(args))
	}
	if got[0].Outcome != storage.Acquired || got[0].Token == 0 || got[0].Err != nil {
		t.Fatalf("fresh key: %+v, want Acquired", got[0])
	}
	if got[1].Outcome != storage.Duplicate || string(got[1].Record.Result) != "done-value" {
		t.Fatalf("completed key: %v %q, want Duplicate %q", got[1].Outcome, got[1].Record.Result, "done-value")
	}
	if got[2].Outcome != storage.Busy || got[2].Record.Attempt != 1 {
		t.Fatalf("busy key: %+v, want Busy with the holder's record", got[2])
	}
	checkBusyHasNoToken(t, e, busy.Key, got[2], holder.Token)
	if !errors.Is(got[3].Err, idem.ErrKeyReused) {
		t.Fatalf("reused key: Err %v, want ErrKeyReused", got[3].Err)
	}
	if got[4].Outcome != storage.Busy || got[4].Record.Attempt != 1 {
		t.Fatalf("second entry of the fresh key: %+v, want Busy behind the first", got[4])
	}
	checkBusyHasNoToken(t, e, fresh.Key, got[4], got[0].Token)
	// The batch's claim is a real claim.
	if err := e.s.Complete(c, fresh.Key, got[0].Token, []byte("f"), time.Minute); err != nil {
		t.Fatalf("Complete of a batch claim: %v", err)
	}
	if d := e.mustClaim(fresh, storage.Duplicate); string(d.Record.Result) != "f" {
		t.Fatalf("after batch: %q", d.Record.Result)
	}
	if got, err := bc.ClaimBatch(c, nil); err != nil || len(got) != 0 {
		t.Fatalf("empty ClaimBatch: %v, %v", got, err)
	}
}

func completeBatchAgrees(t *testing.T, e *env) {
	bc := e.s
	c := ctx(t)
	x, y := e.args("x", "fp"), e.args("y", "fp")
	x.Lease, y.Lease = time.Minute, time.Minute
	cx, cy := e.mustClaim(x, storage.Acquired), e.mustClaim(y, storage.Acquired)
	errs, err := bc.CompleteBatch(c, []storage.Completion{
		{Key: x.Key, Token: cx.Token, Value: []byte("vx"), Retention: time.Minute},
		{Key: y.Key, Token: cy.Token + 1, Value: []byte("wrong"), Retention: time.Minute},
		{Key: e.key("absent"), Token: 7, Value: []byte("v"), Retention: time.Minute},
	})
	if err != nil || len(errs) != 3 {
		t.Fatalf("CompleteBatch: %v, %d errors", err, len(errs))
	}
	if errs[0] != nil || !errors.Is(errs[1], idem.ErrLeaseLost) || !errors.Is(errs[2], idem.ErrLeaseLost) {
		t.Fatalf("CompleteBatch errors %v, want [nil ErrLeaseLost ErrLeaseLost]", errs)
	}
	if d := e.mustClaim(x, storage.Duplicate); string(d.Record.Result) != "vx" {
		t.Fatalf("x: %q, want vx", d.Record.Result)
	}
	if r := e.get("y"); r.Status != storage.StatusInProgress || r.Token != cy.Token {
		t.Fatalf("y after a wrong token: %+v, want unchanged InProgress", r)
	}
}
