package lincheck_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"
	"github.com/idemgo/idem/idemtest"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/integration/lincheck"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

func TestMemstoreIsLinearizable(t *testing.T) {
	s := idemtest.MemStore(t)
	for range 5 {
		lincheck.Check(t, s, lincheck.Options{})
	}
}

func TestRedisIsLinearizable(t *testing.T) {
	t.Parallel()
	s := redisstoretest.Store(t, redisstoretest.Client(t), redisstore.Config{})
	for range 5 {
		lincheck.Check(t, s, lincheck.Options{})
	}
}

func TestPostgresIsLinearizable(t *testing.T) {
	t.Parallel()
	s := pgstoretest.Store(t, pgstoretest.Pool(t, 0), pgstore.Config{})
	for range 5 {
		lincheck.Check(t, s, lincheck.Options{})
	}
}

func TestDynamoDBIsLinearizable(t *testing.T) {
	t.Parallel()
	s := dynamostoretest.Store(t, dynamostoretest.Client(t), dynamostore.Config{})
	for range 5 {
		lincheck.Check(t, s, lincheck.Options{})
	}
}

// checkExpiring runs histories in which leases and records expire, and
// fails unless the model saw the clock decide: leases that ran out and
// were taken over, records forgotten and claimed anew, expired records
// read. A check in which nothing expired would prove nothing about expiry.
// tolerance is the checks' Options.Tolerance (0: the default).
func checkExpiring(t *testing.T, s storage.Store, tolerance time.Duration) {
	o := lincheck.Expiring()
	o.Tolerance = tolerance
	var st lincheck.Stats
	for range 4 {
		st.Add(lincheck.Check(t, s, o))
	}
	t.Logf("%+v", st)
	if st.Takeovers == 0 || st.Recreated == 0 || st.ExpiredSeen == 0 {
		t.Fatalf("histories with short leases held %+v: want takeovers after a lease ran out, records claimed after expiry and expired records seen", st)
	}
}

func TestMemstoreIsLinearizableWithExpiry(t *testing.T) {
	t.Parallel()
	checkExpiring(t, idemtest.MemStore(t), 0)
}

func TestRedisIsLinearizableWithExpiry(t *testing.T) {
	t.Parallel()
	checkExpiring(t, redisstoretest.Store(t, redisstoretest.Client(t), redisstore.Config{}), 0)
}

func TestPostgresIsLinearizableWithExpiry(t *testing.T) {
	t.Parallel()
	checkExpiring(t, pgstoretest.Store(t, pgstoretest.Pool(t, 0), pgstore.Config{}), 0)
}

// TestPostgresPeekingIsLinearizableWithExpiry: a Store whose every claim
// reads the row first, and answers from that read alone when it can, is
// as linearizable as the one-statement claim.
func TestPostgresPeekingIsLinearizableWithExpiry(t *testing.T) {
	t.Parallel()
	checkExpiring(t, pgstoretest.Store(t, pgstoretest.Pool(t, 0), pgstore.Config{Peek: pgstore.PeekAlways}), 0)
}

// TestDynamoDBIsLinearizableWithExpiry runs dynamostore with a clock skew
// margin of 1ms instead of its default second: the store sees a lease or
// record over only that long after its end, which the model takes as clock
// tolerance (the default 2ms, plus the margin).
func TestDynamoDBIsLinearizableWithExpiry(t *testing.T) {
	t.Parallel()
	s := dynamostoretest.Store(t, dynamostoretest.Client(t), dynamostore.Config{MaxClockSkew: time.Millisecond})
	checkExpiring(t, s, lincheck.DefaultTolerance+time.Millisecond)
}

// failures records a check's verdict instead of failing the test.
type failures struct {
	testing.TB
	msgs []string
}

func (f *failures) Helper() {}
func (f *failures) Fatalf(format string, a ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, a...))
}

// mustCatch runs up to n checks of the broken store s and fails t unless
// one of them fails.
func mustCatch(t *testing.T, s storage.Store, o lincheck.Options, n int) {
	t.Helper()
	f := &failures{TB: t}
	for range n {
		if lincheck.Check(f, s, o); len(f.msgs) > 0 {
			t.Log(f.msgs[0])
			return
		}
	}
	t.Fatalf("%d histories on a broken store all passed as linearizable", n)
}

// unfenced lets any caller finish whatever is in progress: the bug
// fencing tokens exist to prevent.
type unfenced struct{ *memstore.Store }

func (u unfenced) Complete(ctx context.Context, key string, _ storage.Token, v []byte, r time.Duration) error {
	rec, err := u.Get(ctx, key)
	if err != nil {
		return idem.ErrLeaseLost
	}
	return u.Store.Complete(ctx, key, rec.Token, v, r)
}

func TestCheckCatchesMissingFencing(t *testing.T) {
	mustCatch(t, unfenced{idemtest.MemStore(t)}, lincheck.Options{}, 10)
}

// stealsLiveLeases takes a key over even while its holder's lease is
// live: two holders at once, the bug leases exist to prevent.
type stealsLiveLeases struct{ *memstore.Store }

func (s stealsLiveLeases) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	c, err := s.Store.Claim(ctx, a)
	if err != nil || c.Outcome != storage.Busy {
		return c, err
	}
	rec, err := s.Get(ctx, a.Key)
	if err != nil {
		return c, nil
	}
	if err := s.Release(ctx, a.Key, rec.Token); err != nil {
		return c, nil
	}
	return s.Store.Claim(ctx, a)
}

// neverForgets keeps every record a thousand times its retention.
type neverForgets struct{ *memstore.Store }

func (s neverForgets) Claim(ctx context.Context, a storage.ClaimArgs) (storage.Claim, error) {
	a.Retention *= 1000
	return s.Store.Claim(ctx, a)
}

func (s neverForgets) Complete(ctx context.Context, key string, t storage.Token, v []byte, r time.Duration) error {
	return s.Store.Complete(ctx, key, t, v, r*1000)
}

// forgetsEarly drops a completed record after a tenth of its retention.
type forgetsEarly struct{ *memstore.Store }

func (s forgetsEarly) Complete(ctx context.Context, key string, t storage.Token, v []byte, r time.Duration) error {
	return s.Store.Complete(ctx, key, t, v, r/10)
}

// ignoresExtend says yes to the holder's Extend and leaves its lease as it
// was, so another claim takes over a lease its holder renewed.
type ignoresExtend struct{ *memstore.Store }

func (s ignoresExtend) Extend(ctx context.Context, key string, t storage.Token, _ time.Duration) error {
	rec, err := s.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) || err == nil && (rec.Status != storage.StatusInProgress || rec.Token != t || t == 0) {
		return idem.ErrLeaseLost
	}
	return err
}

// TestExpiryCheckCatchesBrokenStores shows the model holds the clock: a
// store whose leases or expiries are wrong fails the check with short
// leases.
func TestExpiryCheckCatchesBrokenStores(t *testing.T) {
	for name, s := range map[string]storage.Store{
		"steals live leases": stealsLiveLeases{idemtest.MemStore(t)},
		"never forgets":      neverForgets{idemtest.MemStore(t)},
		"forgets early":      forgetsEarly{idemtest.MemStore(t)},
		"ignores Extend":     ignoresExtend{idemtest.MemStore(t)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mustCatch(t, s, lincheck.Expiring(), 10)
		})
	}
}
