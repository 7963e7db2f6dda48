package idemtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

func init() {
	cases = append(cases, []suiteCase{
		{"ReplayLeavesRecordUnchanged", replayLeavesRecord},
		{"ClaimBatchReplayLeavesRecordUnchanged", claimBatchReplayLeavesRecord},
	}...)
}

// replays is how many duplicates each replay case sends.
const replays = 50

// replayKeys sets up the records a replay must leave as they are: one
// Completed and one Failed through a Guard, one InProgress under a live
// lease. It returns the claim arguments of each (with another lease,
// retention and attempt cap than the first claim's: a store that rewrote
// the record from a duplicate's arguments would show it), the Guard, and
// the records as Get reads them.
func (e *env) replayKeys() (args []storage.ClaimArgs, g *idem.Guard, before []storage.Record) {
	e.t.Helper()
	c := ctx(e.t)
	g = e.guard(e.s, idem.Config{Lease: time.Minute, Retention: time.Minute, FailedRetention: time.Minute})
	payload := []byte("charge 10")
	if _, err := g.Do(c, "done", payload, func(context.Context) ([]byte, error) { return []byte("receipt"), nil }); err != nil {
		e.t.Fatalf("Do(done): %v", err)
	}
	declined := idem.Permanent(errors.New("card declined"))
	if _, err := g.Do(c, "failed", payload, func(context.Context) ([]byte, error) { return nil, declined }); !errors.Is(err, declined) {
		e.t.Fatalf("Do(failed): %v, want the permanent error", err)
	}
	fp := idem.SHA256Fingerprint(nil, payload)
	for _, k := range []string{"done", "failed", "busy"} {
		args = append(args, storage.ClaimArgs{Key: e.key(k), Fingerprint: fp, Lease: 2 * time.Minute, Retention: 3 * time.Minute, MaxAttempts: 1})
	}
	first := args[2]
	first.Lease, first.Retention, first.MaxAttempts = time.Minute, time.Minute, 0
	e.mustClaim(first, storage.Acquired)
	for _, a := range args {
		before = append(before, e.getStored(a.Key))
	}
	// A store that rewrote the record on a duplicate, from its own clock,
	// would now write other times.
	time.Sleep(20 * time.Millisecond)
	return args, g, before
}

// checkReplay checks what a duplicate claim of args[i] answered.
func checkReplay(t *testing.T, i int, c storage.Claim, err error) {
	t.Helper()
	if err == nil {
		err = c.Err
	}
	want := [...]storage.Outcome{storage.Duplicate, storage.Duplicate, storage.Busy}[i]
	if err != nil || c.Outcome != want {
		t.Fatalf("duplicate claim %d: %v %v, want %v", i, c.Outcome, err, want)
	}
	switch i {
	case 0:
		if c.Record.Status != storage.StatusCompleted || string(c.Record.Result) != "receipt" {
			t.Fatalf("replay of the completed key: %v %q", c.Record.Status, c.Record.Result)
		}
	case 1:
		if c.Record.Status != storage.StatusFailed || storage.DecodeFailure(c.Record.Result).Error() != "card declined" {
			t.Fatalf("replay of the failed key: %v %q", c.Record.Status, c.Record.Result)
		}
	}
}

// checkUnchanged compares every field of the records with their reads
// before the duplicates.
func (e *env) checkUnchanged(args []storage.ClaimArgs, before []storage.Record) {
	e.t.Helper()
	for i, a := range args {
		if after := e.getStored(a.Key); !sameRecord(before[i], after) {
			e.t.Fatalf("%d duplicates changed the %v record:\nbefore %+v\nafter  %+v", replays, before[i].Status, before[i], after)
		}
	}
}

// replayLeavesRecord: a duplicate is a read. Claims and Guard calls of a
// Completed or Failed key, or of a key under a live lease, leave its record
// byte for byte as it was: value, status, token, attempt, lease end, expiry
// and fingerprint.
func replayLeavesRecord(t *testing.T, e *env) {
	args, g, before := e.replayKeys()
	dup := func(context.Context) ([]byte, error) { return nil, errors.New("ran on a duplicate") }
	for range replays {
		// A round's calls go out at once, and with a deadline of their own:
		// concurrent duplicates are the common case, and a slow store
		// takes long over all the rounds.
		c := ctx(t)
		claims, claimErrs := make([]storage.Claim, len(args)), make([]error, len(args))
		var done, failed, busy error
		var replayed idem.Result
		var wg sync.WaitGroup
		for i, a := range args {
			wg.Go(func() { claims[i], claimErrs[i] = e.s.Claim(c, a) })
		}
		wg.Go(func() { replayed, done = g.Do(c, "done", []byte("charge 10"), dup) })
		wg.Go(func() { _, failed = g.Do(c, "failed", []byte("charge 10"), dup) })
		wg.Go(func() { _, busy = g.Do(c, "busy", []byte("charge 10"), dup) })
		wg.Wait()
		for i := range args {
			checkReplay(t, i, claims[i], claimErrs[i])
		}
		if done != nil || !replayed.Replayed || string(replayed.Value) != "receipt" {
			t.Fatalf("Guard replay of the completed key: %q %v", replayed.Value, done)
		}
		if !idem.IsPermanent(failed) || failed.Error() != "card declined" {
			t.Fatalf("Guard replay of the failed key: %v, want the permanent error", failed)
		}
		if !errors.Is(busy, idem.ErrInProgress) {
			t.Fatalf("Guard call of the held key: %v, want ErrInProgress", busy)
		}
	}
	e.checkUnchanged(args, before)
}

// claimBatchReplayLeavesRecord is replayLeavesRecord through ClaimBatch.
func claimBatchReplayLeavesRecord(t *testing.T, e *env) {
	bc := e.s
	args, _, before := e.replayKeys()
	var batch []storage.ClaimArgs
	for range replays / 5 {
		batch = append(batch, args...)
	}
	for range 5 {
		got, err := bc.ClaimBatch(ctx(t), batch)
		if err != nil || len(got) != len(batch) {
			t.Fatalf("ClaimBatch: %d claims for %d, %v", len(got), len(batch), err)
		}
		for j, c := range got {
			checkReplay(t, j%len(args), c, nil)
		}
	}
	e.checkUnchanged(args, before)
}
