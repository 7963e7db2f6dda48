package cassandrastore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/idemgo/idem/cassandrastore"
	"github.com/idemgo/idem/cassandrastore/cassandrastoretest"
	"github.com/idemgo/idem/storage"
)

// casTimeout is what the driver returns when the coordinator gives up on
// a Paxos round: a write timeout of write type CAS, outcome unknown.
func casTimeout() error { return &gocql.RequestErrWriteTimeout{WriteType: "CAS"} }

// Faults the tests put between the store and Cassandra, on the
// conditional writes of the operations named (all when none are).
type fault struct {
	ops   map[string]bool
	send  bool         // send the write before answering with the timeout
	times atomic.Int32 // how many more writes to answer so; < 0: all of them
	hook  func()       // runs after the write, before the answer
	hits  atomic.Int32 // writes answered with the timeout
}

func (f *fault) run(op string, exec func() (bool, error)) (bool, error) {
	if len(f.ops) > 0 && !f.ops[op] || f.times.Load() == 0 {
		return exec()
	}
	f.times.Add(-1)
	f.hits.Add(1)
	if f.send {
		if _, err := exec(); err != nil {
			return false, err
		}
	}
	if f.hook != nil {
		f.hook()
	}
	return false, casTimeout()
}

func faulty(t *testing.T, send bool, times int32, ops ...string) (*cassandrastore.Store, *fault) {
	s := cassandrastoretest.Store(t, cassandrastore.Config{})
	f := &fault{ops: map[string]bool{}, send: send}
	f.times.Store(times)
	for _, op := range ops {
		f.ops[op] = true
	}
	cassandrastore.SetFault(s, f.run)
	return s, f
}

var keyN atomic.Int64

func args(t *testing.T, lease time.Duration) storage.ClaimArgs {
	return storage.ClaimArgs{
		Key:         storage.StoreKey("unknown-"+t.Name(), time.Now().String()+string(rune('a'+keyN.Add(1)%26))),
		Fingerprint: []byte("fp"), Lease: lease, Retention: time.Minute,
	}
}

// A claim whose insert was applied but whose answer was a timeout reads
// the record back, finds its own token and is Acquired; the token is the
// one the record holds, and it completes.
func TestClaimAppliedTimeoutAcquires(t *testing.T) {
	t.Parallel()
	s, f := faulty(t, true, 1, "Claim")
	a := args(t, time.Minute)
	c, err := s.Claim(ctxT(t), a)
	if err != nil || c.Outcome != storage.Acquired || f.hits.Load() != 1 {
		t.Fatalf("Claim after an applied write that timed out: %+v, %v (%d timeouts); want Acquired", c, err, f.hits.Load())
	}
	rec, err := s.Get(ctxT(t), a.Key)
	if err != nil || rec.Token != c.Token || rec.Attempt != 1 {
		t.Fatalf("record %+v, %v; want the claim's token %d, attempt 1", rec, err, c.Token)
	}
	if err := s.Complete(ctxT(t), a.Key, c.Token, []byte("v"), time.Minute); err != nil {
		t.Fatalf("Complete: %v", err)
	}
}

// A claim whose insert never reached Cassandra, answered with a timeout,
// reads nothing back, claims again and is Acquired once.
func TestClaimLostTimeoutClaimsAgain(t *testing.T) {
	t.Parallel()
	s, f := faulty(t, false, 1, "Claim")
	a := args(t, time.Minute)
	c, err := s.Claim(ctxT(t), a)
	if err != nil || c.Outcome != storage.Acquired || f.hits.Load() != 1 {
		t.Fatalf("Claim after a write lost with a timeout: %+v, %v; want Acquired", c, err)
	}
	if rec, err := s.Get(ctxT(t), a.Key); err != nil || rec.Token != c.Token {
		t.Fatalf("record %+v, %v; want token %d", rec, err, c.Token)
	}
}

// A claim whose write timed out while another claim took the key, and
// whose read-back finds the other's token, answers Busy, never Acquired.
func TestClaimTimeoutWhileAnotherWins(t *testing.T) {
	t.Parallel()
	s, f := faulty(t, false, 1, "Claim")
	other := cassandrastoretest.Store(t, cassandrastore.Config{})
	a := args(t, time.Minute)
	var won storage.Claim
	f.hook = func() {
		var err error
		if won, err = other.Claim(ctxT(t), a); err != nil || won.Outcome != storage.Acquired {
			t.Errorf("other's claim: %+v, %v", won, err)
		}
	}
	c, err := s.Claim(ctxT(t), a)
	if err != nil || c.Outcome != storage.Busy || c.Token != 0 {
		t.Fatalf("Claim that timed out while another claimed: %+v, %v; want Busy without a token", c, err)
	}
	if rec, _ := s.Get(ctxT(t), a.Key); rec.Token != won.Token {
		t.Fatalf("record's token %d, want the winner's %d", rec.Token, won.Token)
	}
}

// When the read-back fails as well, the claim reports the error and no
// token. Its write was applied: the key stays InProgress with nobody
// holding it until the lease ends, and the next claim then takes over.
func TestClaimTimeoutUnreadableReportsNoClaim(t *testing.T) {
	t.Parallel()
	s, f := faulty(t, true, 1, "Claim")
	ctx, cancel := context.WithCancel(context.Background())
	f.hook = cancel
	a := args(t, 100*time.Millisecond)
	c, err := s.Claim(ctx, a)
	if err == nil || c.Token != 0 || c.Outcome == storage.Acquired {
		t.Fatalf("Claim whose outcome could not be read: %+v, %v; want an error and no token", c, err)
	}
	var held storage.Record
	if held, err = s.Get(ctxT(t), a.Key); err != nil || held.Status != storage.StatusInProgress {
		t.Fatalf("record %+v, %v; want the orphaned claim InProgress", held, err)
	}
	other := cassandrastoretest.Store(t, cassandrastore.Config{MaxClockSkew: time.Millisecond})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := other.Claim(ctxT(t), a)
		if err != nil {
			t.Fatal(err)
		}
		if c.Outcome == storage.Acquired {
			if c.Record.Attempt != 2 || c.Token == held.Token {
				t.Fatalf("takeover %+v, want attempt 2 with a new token", c)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the orphaned claim was never taken over: %+v", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Under concurrent claims of one key whose every write times out (sent
// or not), at most one claim is Acquired, and the record holds its token.
func TestClaimTimeoutsNeverTwoHolders(t *testing.T) {
	t.Parallel()
	for _, send := range []bool{true, false} {
		a := args(t, time.Minute)
		var mu sync.Mutex
		var acquired []storage.Token
		var wg sync.WaitGroup
		for i := range 8 {
			s, _ := faulty(t, send || i%2 == 0, -1, "Claim")
			wg.Go(func() {
				c, err := s.Claim(ctxT(t), a)
				if err == nil && c.Outcome == storage.Acquired {
					mu.Lock()
					acquired = append(acquired, c.Token)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		rec, err := cassandrastoretest.Store(t, cassandrastore.Config{}).Get(ctxT(t), a.Key)
		if err != nil {
			t.Fatal(err)
		}
		if len(acquired) > 1 || len(acquired) == 1 && acquired[0] != rec.Token {
			t.Fatalf("send=%v: acquired %v, record token %d: want at most one holder, the record's", send, acquired, rec.Token)
		}
	}
}

// Complete, Release and Extend whose writes time out read the record back:
// applied is success, lost is written again, and a record another claim
// took meanwhile is ErrLeaseLost.
func TestFencedTimeouts(t *testing.T) {
	t.Parallel()
	ops := map[string]func(s *cassandrastore.Store, key string, tok storage.Token) error{
		"Complete": func(s *cassandrastore.Store, key string, tok storage.Token) error {
			return s.Complete(ctxT(t), key, tok, []byte("v"), time.Minute)
		},
		"Fail": func(s *cassandrastore.Store, key string, tok storage.Token) error {
			return s.Fail(ctxT(t), key, tok, []byte("cause"), time.Minute)
		},
		"Release": func(s *cassandrastore.Store, key string, tok storage.Token) error {
			return s.Release(ctxT(t), key, tok)
		},
		"Extend": func(s *cassandrastore.Store, key string, tok storage.Token) error {
			return s.Extend(ctxT(t), key, tok, time.Minute)
		},
	}
	for op, do := range ops {
		for _, send := range []bool{true, false} {
			s, f := faulty(t, send, 1, op)
			a := args(t, time.Minute)
			c, err := s.Claim(ctxT(t), a)
			if err != nil || c.Outcome != storage.Acquired {
				t.Fatalf("Claim: %+v, %v", c, err)
			}
			if err := do(s, a.Key, c.Token); err != nil || f.hits.Load() != 1 {
				t.Fatalf("%s (sent %v) whose answer was a timeout: %v (%d timeouts), want nil", op, send, err, f.hits.Load())
			}
			rec, err := s.Get(ctxT(t), a.Key)
			if err != nil {
				t.Fatal(err)
			}
			switch op {
			case "Complete":
				if rec.Status != storage.StatusCompleted || string(rec.Result) != "v" {
					t.Fatalf("after Complete: %+v", rec)
				}
			case "Fail":
				if rec.Status != storage.StatusFailed || string(rec.Result) != "cause" {
					t.Fatalf("after Fail: %+v", rec)
				}
			case "Release":
				if rec.Status != storage.StatusInProgress || rec.Token != 0 {
					t.Fatalf("after Release: %+v", rec)
				}
			case "Extend":
				if rec.Token != c.Token || time.Until(rec.LeaseUntil) < 50*time.Second {
					t.Fatalf("after Extend(1m): %+v", rec)
				}
			}
		}

		// The holder's write times out while the record is taken from it.
		s, f := faulty(t, false, 1, op)
		a := args(t, time.Minute)
		c, err := s.Claim(ctxT(t), a)
		if err != nil || c.Outcome != storage.Acquired {
			t.Fatalf("Claim: %+v, %v", c, err)
		}
		other := cassandrastoretest.Store(t, cassandrastore.Config{})
		f.hook = func() {
			if err := other.Delete(ctxT(t), a.Key); err != nil {
				t.Error(err)
			}
			if c, err := other.Claim(ctxT(t), a); err != nil || c.Outcome != storage.Acquired {
				t.Errorf("other's claim: %+v, %v", c, err)
			}
		}
		if err := do(s, a.Key, c.Token); !errors.Is(err, storage.ErrLeaseLost) {
			t.Fatalf("%s that timed out while the record was taken: %v, want ErrLeaseLost", op, err)
		}
	}
}

// Delete and DeleteIf whose writes time out read the record back.
func TestDeleteTimeouts(t *testing.T) {
	t.Parallel()
	for _, send := range []bool{true, false} {
		s, _ := faulty(t, send, 2, "Delete", "DeleteIf")
		for _, conditional := range []bool{false, true} {
			a := args(t, time.Minute)
			c, err := s.Claim(ctxT(t), a)
			if err != nil {
				t.Fatal(err)
			}
			if conditional {
				err = s.DeleteIf(ctxT(t), a.Key, storage.StatusInProgress, c.Token)
			} else {
				err = s.Delete(ctxT(t), a.Key)
			}
			if err != nil {
				t.Fatalf("delete (conditional %v, sent %v) whose answer was a timeout: %v", conditional, send, err)
			}
			if _, err := s.Get(ctxT(t), a.Key); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("Get after the delete: %v, want ErrNotFound", err)
			}
		}
	}
}
