package idemtest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// RunValueCapOnWrite checks that s, whose MaxValueSize is a small limit,
// refuses longer values on write: Complete, Fail and CompleteBatch of one
// byte over it fail with a *storage.ValueTooLargeError that names the size
// and the limit and wraps idem.ErrValueTooLarge, the record stays in
// progress, and a value of exactly the limit completes it.
func RunValueCapOnWrite(t *testing.T, s storage.Store) {
	t.Helper()
	max := s.MaxValueSize()
	if max <= 0 {
		t.Fatalf("RunValueCapOnWrite needs a store with MaxValueSize")
	}
	e := newEnv(t, s)
	a := e.args("k", "fp")
	a.Lease = time.Minute
	c := e.mustClaim(a, storage.Acquired)
	over := make([]byte, max+1)
	check := func(op string, err error) {
		t.Helper()
		if tooLarge, ok := errors.AsType[*storage.ValueTooLargeError](err); !ok || tooLarge.Size != max+1 || tooLarge.Max != max || tooLarge.Stored || !errors.Is(err, idem.ErrValueTooLarge) {
			t.Fatalf("%s with %d bytes: %v, want a *storage.ValueTooLargeError{%d, %d}", op, max+1, err, max+1, max)
		}
	}
	check("Complete", s.Complete(ctx(t), a.Key, c.Token, over, time.Minute))
	check("Fail", s.Fail(ctx(t), a.Key, c.Token, over, time.Minute))
	_, err := s.CompleteBatch(ctx(t), []storage.Completion{
		{Key: a.Key, Token: c.Token, Value: []byte("ok"), Retention: time.Minute},
		{Key: e.key("other"), Token: 1, Value: over, Retention: time.Minute},
	})
	check("CompleteBatch", err)
	if r, err := s.Get(ctx(t), a.Key); err != nil || r.Status != storage.StatusInProgress {
		t.Fatalf("after refused values: %v %v, want the record untouched (InProgress)", r.Status, err)
	}
	if err := s.Complete(ctx(t), a.Key, c.Token, make([]byte, max), time.Minute); err != nil {
		t.Fatalf("Complete with %d bytes (the maximum): %v", max, err)
	}
}
