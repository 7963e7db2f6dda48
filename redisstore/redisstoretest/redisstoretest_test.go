package redisstoretest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExample(t *testing.T) { testDuplicateGetsTheOutcome(t) }

func TestStoresAreIsolatedAndCleanedUp(t *testing.T) {
	c := redisstoretest.Client(t)
	var prefix string
	t.Run("use", func(t *testing.T) {
		a := redisstoretest.Store(t, c, redisstore.Config{})
		b := redisstoretest.Store(t, c, redisstore.Config{})
		prefix = a.Config().Prefix
		if !strings.HasPrefix(prefix, redisstoretest.PrefixBase) || prefix == b.Config().Prefix {
			t.Errorf("prefixes %q and %q, want two different ones under %s", prefix, b.Config().Prefix, redisstoretest.PrefixBase)
		}
		ctx := context.Background()
		// More keys than one SCAN batch or UNLINK holds.
		for i := range 2500 {
			c.Set(ctx, fmt.Sprint(prefix, "extra:", i), "v", time.Minute)
		}
		cl, err := a.Claim(ctx, storage.ClaimArgs{Key: "k", Lease: time.Minute, Retention: time.Hour})
		if err != nil || cl.Outcome != storage.Acquired {
			t.Fatalf("Claim: %v %v, want Acquired", cl.Outcome, err)
		}
		if _, err := b.Get(ctx, "k"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("another test's store sees the key: Get = %v, want ErrNotFound", err)
		}
	})
	keys, err := c.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("%d keys under %s are left after the test ended, such as %q", len(keys), prefix, keys[0])
	}
}

func TestUnreachableServerSkipsOrFails(t *testing.T) {
	t.Setenv("IDEM_REDIS_ADDR", "127.0.0.1:1")
	skip, _ := testenv.CheckUnreachable(t, "IDEM_REDIS_ADDR", func(tb testing.TB) { redisstoretest.Client(tb) })
	if !strings.Contains(skip, "127.0.0.1:1") {
		t.Errorf("skip message %q does not name the address", skip)
	}
}
