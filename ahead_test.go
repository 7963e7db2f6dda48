package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/ahead"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/storage"
)

// claimAhead claims ops under g and returns the answers.
func claimAhead(g *idem.Guard, ops ...ahead.Op) []ahead.Claim {
	claims := make([]ahead.Claim, len(ops))
	ahead.For(g).Claim(context.Background(), ops, claims)
	return claims
}

// A key claimed ahead keeps its lease while its operation waits for a
// worker, for several leases: the worker that takes it late runs it under
// its token, and its value is stored by a later Complete.
func TestAheadLeaseCoversTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		g, err := idem.New(s, idem.Config{Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		cl := claimAhead(g, ahead.Op{Key: "k", Payload: []byte("p")})[0]
		if cl.Held == nil {
			t.Fatalf("claim of a new key: %+v, want it held", cl)
		}
		time.Sleep(5 * time.Second) // five leases in the buffer
		if cl := claimAhead(g, ahead.Op{Key: "k", Payload: []byte("p")})[0]; !errors.Is(cl.Err, idem.ErrInProgress) {
			t.Fatalf("another claim of the waiting key: %+v, want ErrInProgress", cl)
		}
		v, err, ran := cl.Held.Run(func(ctx context.Context) ([]byte, error) {
			if ctx.Err() != nil {
				t.Errorf("the operation's context ended before it ran: %v", context.Cause(ctx))
			}
			if tok, ok := idem.TokenFrom(ctx); !ok || tok == 0 {
				t.Errorf("token %d, %v; want the claim's", tok, ok)
			}
			return []byte("v"), nil
		})
		if !ran || err != nil || string(v) != "v" {
			t.Fatalf("Run: %q, %v, ran %v", v, err, ran)
		}
		time.Sleep(5 * time.Second) // five more, waiting for Complete
		errs := make([]error, 1)
		ahead.For(g).Complete([]ahead.Held{cl.Held}, errs)
		if errs[0] != nil {
			t.Fatalf("Complete: %v", errs[0])
		}
		if rec, err := s.Get(context.Background(), g.StoreKey("k")); err != nil || rec.Status != storage.StatusCompleted || string(rec.Result) != "v" || rec.Attempt != 1 {
			t.Fatalf("record %+v, %v; want completed with v at the first attempt", rec, err)
		}
		if cl := claimAhead(g, ahead.Op{Key: "k", Payload: []byte("p")})[0]; !cl.Replayed || string(cl.Value) != "v" {
			t.Fatalf("a duplicate's claim: %+v, want the value replayed", cl)
		}
	})
}

// A key whose lease is lost while its operation waits (here, another
// holder took it over once it expired: the store was cut off from the
// heartbeat) is not run on the stale claim: Run reports ran false, and the
// operation goes through DoScoped, which finds the key busy.
func TestAheadLeaseLostWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		cut := &cutStore{Store: s}
		g, err := idem.New(cut, idem.Config{Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		cl := claimAhead(g, ahead.Op{Key: "k"})[0]
		cut.extends.Store(true) // the heartbeat's extends fail from now on
		time.Sleep(2 * time.Second)
		other, err := s.Claim(context.Background(), storage.ClaimArgs{Key: g.StoreKey("k"), Fingerprint: idem.SHA256Fingerprint(nil, nil), Lease: time.Minute, Retention: time.Hour})
		if err != nil || other.Outcome != storage.Acquired {
			t.Fatalf("takeover: %+v, %v", other, err)
		}
		_, err, ran := cl.Held.Run(func(context.Context) ([]byte, error) {
			t.Error("ran on a lost lease")
			return nil, nil
		})
		if ran || !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("Run on a lost lease: %v, ran %v; want ErrLeaseLost, not run", err, ran)
		}
		if rec, err := s.Get(context.Background(), g.StoreKey("k")); err != nil || rec.Token != other.Token {
			t.Fatalf("record %+v, %v; want the new holder's, untouched", rec, err)
		}
	})
}

// cutStore fails every Extend once extends is set.
type cutStore struct {
	*memstore.Store
	extends atomic.Bool
}

func (c *cutStore) Extend(ctx context.Context, key string, t storage.Token, lease time.Duration) error {
	if c.extends.Load() {
		return errors.New("connection refused")
	}
	return c.Store.Extend(ctx, key, t, lease)
}

// Operations of one claim that share a key are one operation: the first
// is held, the others left for DoScoped; an invalid key is answered, and
// so is a duplicate of a stored outcome; a released key is claimed again
// at once.
func TestAheadClaimAnswers(t *testing.T) {
	g := newGuard(t, newMem(t), idem.Config{})
	if _, err := g.Do(context.Background(), "done", nil, func(context.Context) ([]byte, error) { return []byte("old"), nil }); err != nil {
		t.Fatal(err)
	}
	cls := claimAhead(g, ahead.Op{Key: "a"}, ahead.Op{Key: "b"}, ahead.Op{Key: "a"}, ahead.Op{Key: ""}, ahead.Op{Key: "done"}, ahead.Op{Scope: "s", Key: "a"})
	switch {
	case cls[0].Held == nil, cls[1].Held == nil, cls[5].Held == nil:
		t.Fatalf("new keys not held: %+v", cls)
	case !cls[2].Later || cls[2].Held != nil:
		t.Fatalf("the second op of key a: %+v, want it left for DoScoped", cls[2])
	case !errors.Is(cls[3].Err, idem.ErrInvalidKey):
		t.Fatalf("an empty key: %+v, want ErrInvalidKey", cls[3])
	case !cls[4].Replayed || string(cls[4].Value) != "old":
		t.Fatalf("a stored key: %+v, want its value replayed", cls[4])
	}
	cls[1].Held.Release()
	_, err, ran := cls[0].Held.Run(func(context.Context) ([]byte, error) { return nil, errors.New("retry me") })
	if !ran || err == nil || err.Error() != "retry me" {
		t.Fatalf("Run of a failing op: %v, ran %v", err, ran)
	}
	_, err, _ = cls[5].Held.Run(func(context.Context) ([]byte, error) { return nil, idem.Permanent(errors.New("poison")) })
	if !idem.IsPermanent(err) {
		t.Fatalf("Run of a poison op: %v, want it permanent", err)
	}
	again := claimAhead(g, ahead.Op{Key: "a"}, ahead.Op{Key: "b"}, ahead.Op{Scope: "s", Key: "a"})
	if again[0].Held == nil || again[1].Held == nil {
		t.Fatalf("keys released by a failure and by Release: %+v, want them claimed again", again[:2])
	}
	var pe *idem.PermanentError
	if !again[2].Replayed || !errors.As(again[2].Err, &pe) {
		t.Fatalf("a key failed permanently: %+v, want its failure replayed", again[2])
	}
	again[0].Held.Release()
	again[1].Held.Release()
}
