package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgo/idem"
)

// TestBadRowIsItsEntrysError: a row with a status this package never
// writes, among a batch's keys, is that entry's error, and the others are
// claimed and answered. The whole ClaimBatch once failed on it, although
// the statement had claimed the other keys: their callers got an error,
// and the keys stayed in progress until their lease ended.
func TestBadRowIsItsEntrysError(t *testing.T) {
	e := newEnv(t, 2)
	ctx := testCtx(t)
	args := func(key string) idem.ClaimArgs {
		return idem.ClaimArgs{Key: key, Fingerprint: []byte("fp"), Lease: idem.DefaultLease, Retention: idem.DefaultRetention}
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
	got, err := e.store.ClaimBatch(ctx, []idem.ClaimArgs{args("before"), args("bad"), args("after")})
	if err != nil {
		t.Fatalf("ClaimBatch with a bad row among its keys: %v, want each entry's answer", err)
	}
	for i, k := range keys {
		switch {
		case k == "bad" && (got[i].Err == nil || !strings.Contains(got[i].Err.Error(), "status 9")):
			t.Errorf("%s: %v, want its status named", k, got[i].Err)
		case k != "bad" && (got[i].Err != nil || got[i].Outcome != idem.Acquired):
			t.Errorf("%s: %v %v, want Acquired", k, got[i].Outcome, got[i].Err)
		}
	}
}
