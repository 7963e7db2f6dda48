package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// limitStore keeps values of max bytes at most, as redisstore and pgstore
// do, and says so when advertise is set ([storage.Store.MaxValueSize]); else it
// reports the limit of the store under it, and refuses anyway.
type limitStore struct {
	storage.Store
	max int
}

func (s limitStore) Complete(ctx context.Context, key string, t storage.Token, value []byte, retention time.Duration) error {
	if len(value) > s.max {
		return fmt.Errorf("limitstore: %w: %d bytes", idem.ErrValueTooLarge, len(value))
	}
	return s.Store.Complete(ctx, key, t, value, retention)
}

func (s limitStore) Fail(ctx context.Context, key string, t storage.Token, cause []byte, retention time.Duration) error {
	if len(cause) > s.max {
		return fmt.Errorf("limitstore: %w: %d bytes", idem.ErrValueTooLarge, len(cause))
	}
	return s.Store.Fail(ctx, key, t, cause, retention)
}

// advertisedLimit is a limitStore that tells its limit.
type advertisedLimit struct{ limitStore }

func (s advertisedLimit) MaxValueSize() int { return s.max }

// sizeGuard returns a Guard over store and what its Observer saw.
func sizeGuard(t *testing.T, store storage.Store) (*idem.Guard, *[]idem.Op) {
	t.Helper()
	var mu sync.Mutex
	ops := new([]idem.Op)
	return newGuard(t, store, idem.Config{Observer: func(_ context.Context, e idem.Event) {
		mu.Lock()
		*ops = append(*ops, e.Op)
		mu.Unlock()
	}}), ops
}

// An operation whose value the store cannot keep ran: its key gets an
// outcome (ErrValueTooLarge) rather than staying in progress until the
// lease ends, and a duplicate never runs it again.
func TestValueTooLargeIsStoredNotLeftInProgress(t *testing.T) {
	for name, wrap := range map[string]func(storage.Store) storage.Store{
		"advertised": func(s storage.Store) storage.Store { return advertisedLimit{limitStore{s, 8}} },
		"refused":    func(s storage.Store) storage.Store { return limitStore{s, 8} },
	} {
		t.Run(name, func(t *testing.T) {
			mem := newMem(t)
			g, ops := sizeGuard(t, wrap(mem))
			ctx := context.Background()
			runs := 0
			fn := func(context.Context) ([]byte, error) {
				runs++
				return []byte("nine bytes"), nil
			}
			res, err := g.Do(ctx, "k", nil, fn)
			if !errors.Is(err, idem.ErrValueTooLarge) || string(res.Value) != "nine bytes" || res.Replayed {
				t.Fatalf("first Do: %q (replayed %v), %v; want the value and an error wrapping ErrValueTooLarge", res.Value, res.Replayed, err)
			}
			rec, err := mem.Get(ctx, g.StoreKey("k"))
			if err != nil || rec.Status != storage.StatusFailed {
				t.Fatalf("record %v, %v; want Failed, not left in progress", rec.Status, err)
			}
			res, err = g.Do(ctx, "k", nil, fn)
			if pe, ok := errors.AsType[*idem.PermanentError](err); !ok || !pe.Replayed || !errors.Is(err, idem.ErrValueTooLarge) || !res.Replayed {
				t.Fatalf("duplicate: %v (replayed %v); want a replayed permanent error wrapping ErrValueTooLarge", err, res.Replayed)
			}
			if runs != 1 {
				t.Fatalf("the operation ran %d times, want once", runs)
			}
			if !bytes.Contains(opBytes(*ops), []byte(idem.OpTooLarge.String())) {
				t.Errorf("the Observer saw %v, no %v", *ops, idem.OpTooLarge)
			}
			// A value that fits is stored as usual.
			if _, err := g.Do(ctx, "small", nil, func(context.Context) ([]byte, error) { return []byte("fits"), nil }); err != nil {
				t.Fatal(err)
			}
			if res, err := g.Do(ctx, "small", nil, fn); err != nil || string(res.Value) != "fits" {
				t.Fatalf("a value that fits: %q, %v", res.Value, err)
			}
		})
	}
}

func opBytes(ops []idem.Op) []byte {
	var b bytes.Buffer
	for _, op := range ops {
		b.WriteString(op.String() + " ")
	}
	return b.Bytes()
}

// A permanent error whose message the store cannot keep is stored without
// its message, not left in progress.
func TestLongPermanentErrorIsStoredWithoutItsMessage(t *testing.T) {
	for name, store := range map[string]func(storage.Store) storage.Store{
		"advertised": func(s storage.Store) storage.Store { return advertisedLimit{limitStore{s, 16}} },
		"refused":    func(s storage.Store) storage.Store { return limitStore{s, 16} },
	} {
		g, _ := sizeGuard(t, store(newMem(t)))
		ctx := context.Background()
		long := idem.Permanent(errors.New(strings.Repeat("declined ", 10)))
		if _, err := g.Do(ctx, "k", nil, func(context.Context) ([]byte, error) { return nil, long }); err != long {
			t.Fatalf("%s: first Do: %v, want the operation's error", name, err)
		}
		_, err := g.Do(ctx, "k", nil, func(context.Context) ([]byte, error) { return nil, errors.New("ran again") })
		if pe, ok := errors.AsType[*idem.PermanentError](err); !ok || !pe.Replayed || !strings.Contains(err.Error(), "too large") {
			t.Fatalf("%s: duplicate: %v; want a replayed permanent error saying its message was too large", name, err)
		}
	}
}
