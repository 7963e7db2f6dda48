package idemtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) { idemtest.Main(m, "github.com/idemgo/idem") }

// broken wraps memstore with one of the bugs the suite exists to catch.
type broken struct {
	*memstore.Store
	bug string
}

func (b broken) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	switch b.bug {
	case "ignores-fingerprint":
		a.Fingerprint = nil
	case "check-then-act":
		// Looks first, then claims: two callers that both saw no record
		// both think they won.
		_, err := b.Get(ctx, a.Key)
		time.Sleep(time.Millisecond) // a network round trip between check and act
		c, cerr := b.Store.Claim(ctx, a)
		if errors.Is(err, storage.ErrNotFound) && c.Outcome == storage.Busy {
			return storage.Claim{Outcome: storage.Acquired, Token: c.Record.Token, Record: c.Record}, cerr
		}
		return c, cerr
	case "writes-on-replay":
		// Refreshes a replayed outcome's retention from the duplicate's
		// arguments, as a store that rewrites the record would.
		c, err := b.Store.Claim(ctx, a)
		if err == nil && c.Outcome == storage.Duplicate {
			b.Store.Delete(ctx, a.Key)
			n, _ := b.Store.Claim(ctx, a)
			if c.Record.Status == storage.StatusFailed {
				b.Store.Fail(ctx, a.Key, n.Token, c.Record.Result, a.Retention)
			} else {
				b.Store.Complete(ctx, a.Key, n.Token, c.Record.Result, a.Retention)
			}
		}
		return c, err
	}
	return b.Store.Claim(ctx, a)
}

func (b broken) Complete(ctx context.Context, key string, t storage.Token, v []byte, r time.Duration) error {
	if b.bug == "no-fencing" {
		if rec, err := b.Get(ctx, key); err == nil && rec.Status == storage.StatusInProgress {
			t = rec.Token // whoever asks may finish
		}
	}
	return b.Store.Complete(ctx, key, t, v, r)
}

func (b broken) DeleteIf(ctx context.Context, key string, st storage.Status, t storage.Token) error {
	if b.bug == "check-then-delete" {
		// Compares, then deletes: a claim between the two loses its record.
		r, err := b.Get(ctx, key)
		if err != nil {
			return err
		}
		if r.Status != st || r.Token != t {
			return storage.ErrChanged
		}
		time.Sleep(time.Millisecond)
		return b.Store.Delete(ctx, key)
	}
	return b.Store.DeleteIf(ctx, key, st, t)
}

// TestBrokenStore runs the suite against one broken store when the parent
// test asks for it.
func TestBrokenStore(t *testing.T) {
	bug := os.Getenv("IDEMTEST_BUG")
	if bug == "" {
		t.Skip("run by TestSuiteCatchesBrokenStores")
	}
	s := idemtest.MemStore(t)
	idemtest.Run(t, func(*testing.T) storage.Store { return broken{s, bug} })
}

func TestSuiteCatchesBrokenStores(t *testing.T) {
	for bug, failing := range map[string]string{
		"ignores-fingerprint": "FingerprintMismatchInEveryStatus",
		"check-then-act":      "ConcurrentClaimsOneWinner",
		"no-fencing":          "StaleTokenIsFenced",
		"writes-on-replay":    "ReplayLeavesRecordUnchanged",
		"check-then-delete":   "DeleteIfRacesClaims",
	} {
		t.Run(bug, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenStore$", "-test.count=1")
			cmd.Env = append(os.Environ(), "IDEMTEST_BUG="+bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store with bug %q", bug)
			}
			if !strings.Contains(string(out), "--- FAIL: TestBrokenStore/"+failing) {
				t.Fatalf("bug %q: the suite did not fail %s:\n%s", bug, failing, out)
			}
		})
	}
}

func TestMemstorePasses(t *testing.T) {
	s := idemtest.MemStore(t)
	idemtest.Run(t, func(*testing.T) storage.Store { return s })
}

// limited reads a memstore as a store with a smaller value limit would:
// it refuses a stored result over max, unless its bug is to replay it.
type limited struct {
	*memstore.Store
	max   int
	buggy bool
}

var errStoredTooLarge = fmt.Errorf("stored value over the limit: %w", idem.ErrValueTooLarge)

func (l limited) MaxValueSize() int { return l.max }

func (l limited) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	c, err := l.Store.Claim(ctx, a)
	if err == nil && len(c.Record.Result) > l.max && !l.buggy {
		return storage.Claim{}, errStoredTooLarge
	}
	return c, err
}

func (l limited) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	out := make([]storage.Claim, len(args))
	for i, a := range args {
		out[i], out[i].Err = l.Claim(ctx, a)
	}
	return out, nil
}

func (l limited) Get(ctx context.Context, key string) (storage.Record, error) {
	r, err := l.Store.Get(ctx, key)
	if err == nil && len(r.Result) > l.max && !l.buggy {
		return storage.Record{}, errStoredTooLarge
	}
	return r, err
}

func TestRunStoredValueOverLimit(t *testing.T) {
	s := idemtest.MemStore(t)
	buggy := os.Getenv("IDEMTEST_BUG") == "replays-oversized"
	idemtest.RunStoredValueOverLimit(t, s, limited{Store: s, max: 1024, buggy: buggy},
		func(err error, _ string, _ int) bool { return errors.Is(err, errStoredTooLarge) })
}

func TestRunStoredValueOverLimitCatchesAReplay(t *testing.T) {
	if os.Getenv("IDEMTEST_BUG") != "" {
		t.Skip("the parent of a broken run")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunStoredValueOverLimit$", "-test.count=1")
	cmd.Env = append(os.Environ(), "IDEMTEST_BUG=replays-oversized")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Claim of a record holding 4097 bytes") {
		t.Fatalf("RunStoredValueOverLimit passed a store that replays oversized values:\n%s", out)
	}
}

// slow is memstore behind a network whose round trip is two of the
// suite's leases, as a store on a loaded machine can be: a case that bets a lease
// outlives a few round trips finds it taken over.
type slow struct{ *memstore.Store }

// rtt is slow's delay, half before each call and half after it.
const rtt = 2 * idemtest.Lease

func (s slow) delay() func() {
	time.Sleep(rtt / 2)
	return func() { time.Sleep(rtt / 2) }
}

func (s slow) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	defer s.delay()()
	return s.Store.Claim(ctx, a)
}
func (s slow) Complete(ctx context.Context, key string, t storage.Token, v []byte, r time.Duration) error {
	defer s.delay()()
	return s.Store.Complete(ctx, key, t, v, r)
}
func (s slow) Fail(ctx context.Context, key string, t storage.Token, v []byte, r time.Duration) error {
	defer s.delay()()
	return s.Store.Fail(ctx, key, t, v, r)
}
func (s slow) Release(ctx context.Context, key string, t storage.Token) error {
	defer s.delay()()
	return s.Store.Release(ctx, key, t)
}
func (s slow) Extend(ctx context.Context, key string, t storage.Token, lease time.Duration) error {
	defer s.delay()()
	return s.Store.Extend(ctx, key, t, lease)
}
func (s slow) Get(ctx context.Context, key string) (storage.Record, error) {
	defer s.delay()()
	return s.Store.Get(ctx, key)
}
func (s slow) Delete(ctx context.Context, key string) error {
	defer s.delay()()
	return s.Store.Delete(ctx, key)
}
func (s slow) DeleteIf(ctx context.Context, key string, st storage.Status, t storage.Token) error {
	defer s.delay()()
	return s.Store.DeleteIf(ctx, key, st, t)
}
func (s slow) ClaimBatch(ctx context.Context, as []storage.ClaimArgs) ([]storage.Claim, error) {
	defer s.delay()()
	return s.Store.ClaimBatch(ctx, as)
}
func (s slow) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	defer s.delay()()
	return s.Store.CompleteBatch(ctx, cs)
}

// TestSuiteToleratesASlowStore runs the suite over a correct store whose
// every call takes longer than the suite's lease: it must pass. A case
// that claims with the suite's short lease and then expects no takeover a
// few calls later fails here, as it would on a loaded machine.
func TestSuiteToleratesASlowStore(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: every store call takes 100 ms")
	}
	s := idemtest.MemStore(t)
	idemtest.Run(t, func(*testing.T) storage.Store { return slow{s} })
}
