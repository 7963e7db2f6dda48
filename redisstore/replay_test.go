package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// dirty returns the server's count of writes since its last save
// (rdb_changes_since_last_save): a server of the test's own runs with
// --save "", so every change to its data since it started is counted.
func dirty(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(ctxT(t), "persistence").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "rdb_changes_since_last_save:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("rdb_changes_since_last_save %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("INFO persistence has no rdb_changes_since_last_save:\n%s", info)
	return 0
}

// TestReplayWritesNothing sends 1,000 duplicates of a Completed, a Failed
// and a held key (Claim, ClaimBatch and Guard.Do) to a server of the
// test's own and reads its write counter before and after: a replay is a
// read, it changes nothing on the server.
func TestReplayWritesNothing(t *testing.T) {
	srv := startServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr()})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g := idemtest.Guard(t, s, idem.Config{Namespace: "replay"})
	ctx := ctxT(t)
	payload := []byte("charge 10")
	if _, err := g.Do(ctx, "done", payload, func(context.Context) ([]byte, error) { return []byte("receipt"), nil }); err != nil {
		t.Fatal(err)
	}
	declined := idem.Permanent(errors.New("card declined"))
	if _, err := g.Do(ctx, "failed", payload, func(context.Context) ([]byte, error) { return nil, declined }); !errors.Is(err, declined) {
		t.Fatal(err)
	}
	fp := idem.SHA256Fingerprint(nil, payload)
	var args []storage.ClaimArgs
	for _, k := range []string{"done", "failed", "busy"} {
		args = append(args, storage.ClaimArgs{Key: g.StoreKey(k), Fingerprint: fp, Lease: time.Minute, Retention: time.Hour, MaxAttempts: 1})
	}
	held, err := s.Claim(ctx, args[2])
	if err != nil || held.Outcome != storage.Acquired {
		t.Fatalf("claim of the held key: %v %v", held.Outcome, err)
	}
	if _, err := s.ClaimBatch(ctx, args); err != nil { // the batch script is in the server's cache
		t.Fatal(err)
	}

	before := dirty(t, c)
	want := []storage.Outcome{storage.Duplicate, storage.Duplicate, storage.Busy}
	for i := range 1000 {
		switch i % 4 {
		case 0, 1, 2:
			if cl, err := s.Claim(ctx, args[i%4]); err != nil || cl.Outcome != want[i%4] {
				t.Fatalf("duplicate claim of %q: %v %v, want %v", args[i%4].Key, cl.Outcome, err, want[i%4])
			}
		case 3:
			if res, err := g.Do(ctx, "done", payload, func(context.Context) ([]byte, error) { return nil, errors.New("ran on a duplicate") }); err != nil || !res.Replayed {
				t.Fatalf("Guard replay: %q %v", res.Value, err)
			}
		}
	}
	for range 100 {
		cls, err := s.ClaimBatch(ctx, args)
		if err != nil {
			t.Fatal(err)
		}
		for i, cl := range cls {
			if cl.Err != nil || cl.Outcome != want[i] {
				t.Fatalf("duplicate in a batch of %q: %v %v, want %v", args[i].Key, cl.Outcome, cl.Err, want[i])
			}
		}
	}
	if n := dirty(t, c) - before; n != 0 {
		t.Fatalf("1,100 replays made %d writes on the server, want none", n)
	}

	// The counter sees a write: the holder's heartbeat is one.
	if err := s.Extend(ctx, args[2].Key, held.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := dirty(t, c) - before; n != 1 {
		t.Fatalf("an Extend counted %d writes, want 1", n)
	}
}
