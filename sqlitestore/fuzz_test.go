package sqlitestore_test

import (
	"testing"
	"time"

	"github.com/idemgo/idem/sqlitestore"
	"github.com/idemgo/idem/storage"
)

// FuzzKeys: any two different keys (any bytes: NUL, invalid UTF-8, a
// prefix of the other) are two records, each read back as written. The
// store has no decoder of its own to fuzz: keys and values are BLOBs,
// bound and read by the driver; this checks that no byte is lost or
// taken for a terminator on the way.
func FuzzKeys(f *testing.F) {
	s, _ := newStore(f, sqlitestore.Config{})
	for _, seed := range [][2]string{{"a", "b"}, {"\x00", "\x00\x00"}, {"k", "k\x00"}, {"\xff\xfe", "\xff"}, {"é", "e\u0301"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, k1, k2 string) {
		if k1 == k2 {
			return
		}
		ctx := testCtx(t)
		defer s.Delete(ctx, k1)
		defer s.Delete(ctx, k2)
		a := func(k, fp string) storage.ClaimArgs {
			return storage.ClaimArgs{Key: k, Fingerprint: []byte(fp), Lease: time.Minute, Retention: time.Hour}
		}
		c1, err := s.Claim(ctx, a(k1, "one"))
		if err != nil || c1.Outcome != storage.Acquired {
			t.Fatalf("Claim(%q): %v %v", k1, c1.Outcome, err)
		}
		c2, err := s.Claim(ctx, a(k2, "two"))
		if err != nil || c2.Outcome != storage.Acquired {
			t.Fatalf("Claim(%q) after Claim(%q): %v %v, want a record of its own", k2, k1, c2.Outcome, err)
		}
		if err := s.Complete(ctx, k1, c1.Token, []byte(k1), time.Hour); err != nil {
			t.Fatal(err)
		}
		r1, err := s.Get(ctx, k1)
		if err != nil || r1.Status != storage.StatusCompleted || string(r1.Result) != k1 || string(r1.Fingerprint) != "one" {
			t.Fatalf("Get(%q): %+v %v", k1, r1, err)
		}
		r2, err := s.Get(ctx, k2)
		if err != nil || r2.Status != storage.StatusInProgress || string(r2.Fingerprint) != "two" {
			t.Fatalf("Get(%q) after completing %q: %+v %v", k2, k1, r2, err)
		}
	})
}
