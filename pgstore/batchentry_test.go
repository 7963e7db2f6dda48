package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/storage"
)

// TestBadRowIsItsEntrysError: a row with a status this package never
// writes, among a batch's keys, is that entry's error, and the others are
// claimed and answered. The whole ClaimBatch once failed on it, although
// the statement had claimed the other keys: their callers got an error,
// and the keys stayed in progress until their lease ended.
func TestBadRowIsItsEntrysError(t *testing.T) {
	e := newEnv(t, 2)
	ctx := testCtx(t)
	args := func(key string) storage.ClaimArgs {
		return storage.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: idem.DefaultLease, Retention: idem.DefaultRetention}
	}
	c, err := e.store.Claim(ctx, args("bad"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Complete(ctx, "bad", c.Token, []byte("v"), idem.DefaultRetention); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(context.Background(), "UPDATE "+e.table+" SET status = 9 WHERE key = $1", []byte("bad")); err != nil {
		t.Fatal(err)
	}
	keys := []string{"before", "bad", "after"}
	got, err := e.store.ClaimBatch(ctx, []storage.ClaimArgs{args("before"), args("bad"), args("after")})
	if err != nil {
		t.Fatalf("ClaimBatch with a bad row among its keys: %v, want each entry's answer", err)
	}
	for i, k := range keys {
		switch {
		case k == "bad" && (got[i].Err == nil || !strings.Contains(got[i].Err.Error(), "status 9")):
			t.Errorf("%s: %v, want its status named", k, got[i].Err)
		case k != "bad" && (got[i].Err != nil || got[i].Outcome != storage.Acquired):
			t.Errorf("%s: %v %v, want Acquired", k, got[i].Outcome, got[i].Err)
		}
	}
}

// TestScanPages: a Scan over more records than a page lists each once,
// from the prefix on, and none past it.
func TestScanPages(t *testing.T) {
	e := newEnv(t, 4)
	ctx := testCtx(t)
	const n = 1234
	args := make([]storage.ClaimArgs, 0, n)
	for i := range n {
		args = append(args, storage.ClaimArgs{Key: storage.StoreKey("scan", fmt.Sprintf("k%05d", i)), Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Minute})
	}
	if _, err := e.store.ClaimBatch(ctx, args); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Claim(ctx, storage.ClaimArgs{Key: storage.StoreKey("scan2", "other"), Fingerprint: []byte("fp"), Lease: time.Minute, Retention: time.Minute}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	if err := e.store.Scan(ctx, storage.NamespacePrefix("scan"), func(r storage.Record) bool { seen[r.Key]++; return true }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("Scan listed %d records, want %d", len(seen), n)
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("Scan listed %q %d times", k, c)
		}
	}
}
