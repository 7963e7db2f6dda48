package pgstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
)

func TestValueCapOnWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	s, err := pgstore.New(e.pool, pgstore.Config{Table: e.table, MaxValueSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxValueSize() != 16 || e.store.MaxValueSize() != pgstore.DefaultMaxValueSize {
		t.Fatalf("MaxValueSize() = %d and %d by default, want 16 and %d", s.MaxValueSize(), e.store.MaxValueSize(), pgstore.DefaultMaxValueSize)
	}
	idemtest.RunValueCapOnWrite(t, s)
}

// TestStoredValueOverTheCapIsRefusedOnRead: a record another Store (with
// a larger limit) stored is refused by Claim, ClaimBatch and Get with a
// *storage.ValueTooLargeError naming the key and the stored size.
func TestStoredValueOverTheCapIsRefusedOnRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	for name, peek := range map[string]pgstore.Peek{"peek": pgstore.PeekAlways, "no peek": pgstore.PeekNever} {
		t.Run(name, func(t *testing.T) {
			reader, err := pgstore.New(e.pool, pgstore.Config{Table: e.table, MaxValueSize: 1024, Peek: peek})
			if err != nil {
				t.Fatal(err)
			}
			idemtest.RunStoredValueOverLimit(t, e.store, reader, func(err error, key string, size int) bool {
				tooLarge, ok := errors.AsType[*storage.ValueTooLargeError](err)
				return ok && tooLarge.Stored && tooLarge.Key == key && tooLarge.Size == size && tooLarge.Max == 1024
			})
		})
	}
}

func TestMaxValueSizeConfig(t *testing.T) {
	for _, n := range []int{-1, pgstore.MaxValueSizeLimit + 1} {
		if _, err := pgstore.New(dummyDB{}, pgstore.Config{MaxValueSize: n}); err == nil || !strings.HasPrefix(err.Error(), "pgstore: Config.MaxValueSize") {
			t.Errorf("MaxValueSize %d: %v, want an error naming Config.MaxValueSize", n, err)
		}
	}
}
