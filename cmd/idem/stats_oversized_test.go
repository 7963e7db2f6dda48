package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

// TestStatsAndPurgeGoPastAnOversizedRecord: a record in Redis whose result
// is over the store's MaxValueSize (another program wrote it, or a store
// with a larger cap) is counted by stats and deleted by purge --status,
// without its result; neither stops at it, and neither prints its key.
func TestStatsAndPurgeGoPastAnOversizedRecord(t *testing.T) {
	raw, s := kindStore(t, "redis")
	rs, ok := s.(*redisstore.Store)
	if !ok {
		t.Fatalf("the redis store is a %T", s)
	}
	ctx := context.Background()
	ns := "oversized-" + strings.ReplaceAll(t.Name(), "/", "-")
	const secret = "tenant-7/card-4242"
	// A Completed record of redisstore's format 3 (see its protocol.go):
	// version, status, token, attempt, expiry in Unix ms, no fingerprint,
	// then the result.
	big := []byte{3, byte(storage.StatusCompleted)}
	big = binary.BigEndian.AppendUint64(big, 7)
	big = binary.BigEndian.AppendUint32(big, 1)
	big = binary.BigEndian.AppendUint64(big, uint64(time.Now().Add(time.Hour).UnixMilli()))
	big = binary.BigEndian.AppendUint16(big, 0)
	big = append(big, make([]byte, rs.MaxValueSize()+1)...)
	if err := redisstoretest.Client(t).Set(ctx, rs.RedisKey(storage.StoreKey(ns, secret)), big, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(ctx, storage.ClaimArgs{Key: storage.StoreKey(ns, "small"), Lease: time.Minute, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, storage.StoreKey(ns, "small"), claimed.Token, []byte("ok"), time.Hour); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := runArgs(t, "stats", "--store", raw, "--namespace", ns, "--json")
	var got []nsStats
	if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || len(got) != 1 || got[0].Completed != 2 {
		t.Fatalf("stats --json: %d\n%s%s; want both records counted", code, stdout, stderr)
	}
	code, stdout, stderr = runArgs(t, "purge", "--store", raw, "--namespace", ns, "--status", "completed", "--yes")
	if code != 0 || !strings.Contains(stdout, "deleted 2 completed records") {
		t.Fatalf("purge --status completed --yes: %d\n%s%s", code, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, secret) {
		t.Errorf("the output names the raw key:\n%s%s", stdout, stderr)
	}
}
