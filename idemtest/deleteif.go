package idemtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// The cases of Store.DeleteIf, the conditional delete of an operator's
// tools (idem purge): it deletes the record read, and never one a holder
// took since.
func init() {
	cases = append(cases, []suiteCase{
		{"DeleteIfDeletesTheRecordRead", deleteIfDeletes},
		{"DeleteIfRefusesAChangedRecord", deleteIfRefuses},
		{"DeleteIfRacesClaims", deleteIfRaces},
	}...)
}

// deleteIfDeletes: a record unchanged since it was read is deleted, in
// every status, released included, and its holder is fenced after.
func deleteIfDeletes(t *testing.T, e *env) {
	c := ctx(t)
	a := e.args("in-progress", "fp")
	a.Lease = time.Minute
	held := e.mustClaim(a, storage.Acquired)
	e.mustDeleteRead("in-progress")
	wantErr(t, "Complete after DeleteIf", e.s.Complete(c, a.Key, held.Token, []byte("v"), time.Minute), idem.ErrLeaseLost)

	released := e.args("released", "fp")
	r := e.mustClaim(released, storage.Acquired)
	if err := e.s.Release(c, released.Key, r.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	e.mustDeleteRead("released")

	for _, o := range outcomes {
		e.finish(o.key, o.fail, storage.EncodeFailure(errors.New("no")))
		e.mustDeleteRead(o.key)
	}
}

// mustDeleteRead reads k's record, deletes it with DeleteIf on what it
// read, and checks that it is gone.
func (e *env) mustDeleteRead(k string) {
	e.t.Helper()
	r := e.get(k)
	if err := e.s.DeleteIf(ctx(e.t), r.Key, r.Status, r.Token); err != nil {
		e.t.Fatalf("%s: DeleteIf(%v, token %d) of the record just read: %v", k, r.Status, r.Token, err)
	}
	if _, err := e.s.Get(ctx(e.t), r.Key); !errors.Is(err, storage.ErrNotFound) {
		e.t.Fatalf("%s: Get after DeleteIf: %v, want ErrNotFound", k, err)
	}
}

// deleteIfRefuses: a record taken over, finished, or deleted and claimed
// again since it was read is left as it is, with ErrChanged; a key with
// no record answers ErrNotFound.
func deleteIfRefuses(t *testing.T, e *env) {
	c := ctx(t)
	wantErr(t, "DeleteIf of a missing key", e.s.DeleteIf(c, e.key("missing"), storage.StatusCompleted, 1), storage.ErrNotFound)

	// A stalled record read by the operator, then taken over.
	a := e.args("taken-over", "fp")
	e.mustClaim(a, storage.Acquired)
	stalled := e.get("taken-over")
	cur := e.awaitAcquire(a)
	e.mustKeep("taken over", stalled)
	if err := e.s.Complete(c, a.Key, cur.Token, []byte("v"), time.Minute); err != nil {
		t.Fatalf("the new holder's Complete after a refused DeleteIf: %v", err)
	}

	// Read in progress, then completed by its holder.
	b := e.args("finished", "fp")
	b.Lease = time.Minute
	held := e.mustClaim(b, storage.Acquired)
	running := e.get("finished")
	if err := e.s.Complete(c, b.Key, held.Token, []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	e.mustKeep("finished", running)
	// The right token in another status.
	wantErr(t, "DeleteIf(Failed) of a Completed record", e.s.DeleteIf(c, b.Key, storage.StatusFailed, held.Token), storage.ErrChanged)

	// Read, deleted by someone else, and claimed again.
	d := e.args("recreated", "fp")
	d.Lease = time.Minute
	e.mustClaim(d, storage.Acquired)
	first := e.get("recreated")
	if err := e.s.Delete(c, d.Key); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "DeleteIf of a deleted record", e.s.DeleteIf(c, d.Key, first.Status, first.Token), storage.ErrNotFound)
	e.mustClaim(d, storage.Acquired)
	e.mustKeep("recreated", first)
}

// mustKeep checks that DeleteIf on stale, a record read before the key's
// record changed, answers ErrChanged and leaves the record as it is.
func (e *env) mustKeep(what string, stale storage.Record) {
	e.t.Helper()
	before := e.getStored(stale.Key)
	err := e.s.DeleteIf(ctx(e.t), stale.Key, stale.Status, stale.Token)
	wantErr(e.t, fmt.Sprintf("%s: DeleteIf(%v, token %d) of a record now %v with token %d", what, stale.Status, stale.Token, before.Status, before.Token), err, storage.ErrChanged)
	if after := e.getStored(stale.Key); !sameRecord(before, after) {
		e.t.Fatalf("%s: a refused DeleteIf changed the record:\nbefore %+v\nafter  %+v", what, before, after)
	}
}

// deleteIfRaces runs, for many released records at once, a DeleteIf of
// the record read against two claims that take it over: whichever comes
// first, the claim that acquires keeps its record. A DeleteIf that
// compares and deletes in two steps deletes the new holder's record here,
// as idem purge once did.
func deleteIfRaces(t *testing.T, e *env) {
	const keys = 32
	read := make([]storage.Record, keys)
	for i := range read {
		a := e.args(fmt.Sprint("k", i), "fp")
		a.Lease = time.Minute
		c := e.mustClaim(a, storage.Acquired)
		if err := e.s.Release(ctx(t), a.Key, c.Token); err != nil {
			t.Fatalf("Release: %v", err)
		}
		read[i] = e.getStored(a.Key)
	}
	type answer struct {
		claims [2]storage.Claim
		del    error
	}
	answers := make([]answer, keys)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, r := range read {
		a := e.args(fmt.Sprint("k", i), "fp")
		a.Lease = time.Minute // no takeover of the takeover
		// The claims of the keys start spread over a few hundred
		// microseconds, so that some land between a broken store's check
		// and its delete whatever the scheduler does with the start.
		stagger := time.Duration(i%8) * 150 * time.Microsecond
		for j := range 2 {
			wg.Go(func() {
				<-start
				time.Sleep(stagger)
				c, err := e.s.Claim(context.Background(), a)
				if err != nil {
					t.Errorf("Claim(%q): %v", a.Key, err)
				}
				answers[i].claims[j] = c
			})
		}
		wg.Go(func() {
			<-start
			answers[i].del = e.s.DeleteIf(context.Background(), r.Key, r.Status, r.Token)
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, ans := range answers {
		var won *storage.Claim
		for j := range ans.claims {
			if ans.claims[j].Outcome == storage.Acquired {
				if won != nil {
					t.Fatalf("key %d: both claims acquired", i)
				}
				won = &ans.claims[j]
			}
		}
		if won == nil {
			t.Fatalf("key %d: no claim acquired a released record", i)
		}
		switch {
		case ans.del == nil && won.Record.Attempt != 1:
			t.Errorf("key %d: DeleteIf deleted, yet the claim took the old record over (attempt %d)", i, won.Record.Attempt)
		case ans.del != nil && !errors.Is(ans.del, storage.ErrChanged):
			t.Errorf("key %d: DeleteIf: %v, want nil or ErrChanged", i, ans.del)
		}
		got, err := e.s.Get(ctx(t), read[i].Key)
		if err != nil || got.Token != won.Token {
			t.Errorf("key %d: the new holder's record (token %d) after a racing DeleteIf: %+v, %v", i, won.Token, got, err)
		}
	}
}
