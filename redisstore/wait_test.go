package redisstore_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// TestWaitReplicas runs a primary and a replica of the test's own: with
// WaitReplicas 1 an outcome write returns once the replica holds it; asking
// for 2 of the one replica returns ErrNotReplicated, the outcome stored on
// the primary all the same.
func TestWaitReplicas(t *testing.T) {
	primary := startServer(t, "--repl-diskless-sync-delay", "0")
	replica := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	pc := redis.NewClient(&redis.Options{Addr: primary.addr()})
	rc := redis.NewClient(&redis.Options{Addr: replica.addr()})
	t.Cleanup(func() { pc.Close(); rc.Close() })
	ctx := ctxT(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := rc.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not sync within 10s:\n%s", info)
		}
		time.Sleep(20 * time.Millisecond)
	}

	one, err := redisstore.New(pc, redisstore.Config{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	two, err := redisstore.New(pc, redisstore.Config{WaitReplicas: 2, WaitTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	onReplica, _ := redisstore.New(rc, redisstore.Config{})

	claim := func(key string) storage.Token {
		t.Helper()
		c, err := one.Claim(ctx, claimArgs(key))
		if err != nil || c.Outcome != storage.Acquired {
			t.Fatalf("Claim %q: %v %v", key, c.Outcome, err)
		}
		return c.Token
	}
	stored := func(s *redisstore.Store, key string) bool {
		r, err := s.Get(ctx, key)
		return err == nil && r.Status == storage.StatusCompleted
	}

	if err := one.Complete(ctx, "a", claim("a"), []byte("v"), time.Minute); err != nil {
		t.Fatalf("Complete waiting for 1 replica: %v", err)
	}
	if !stored(onReplica, "a") {
		t.Fatal("Complete waited for the replica, yet the replica does not hold the outcome")
	}
	errs, err := one.CompleteBatch(ctx, []storage.Completion{
		{Key: "b", Token: claim("b"), Value: []byte("v"), Retention: time.Minute},
		{Key: "c", Token: claim("c"), Value: []byte("v"), Retention: time.Minute},
		{Key: "d", Token: 1, Value: []byte("v"), Retention: time.Minute},
	})
	if err != nil || errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], idem.ErrLeaseLost) {
		t.Fatalf("CompleteBatch waiting for 1 replica: %v %v", errs, err)
	}
	if !stored(onReplica, "b") || !stored(onReplica, "c") {
		t.Fatal("CompleteBatch waited for the replica, yet the replica does not hold the outcomes")
	}

	err = two.Complete(ctx, "e", claim("e"), []byte("v"), time.Minute)
	if !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("Complete waiting for 2 of 1 replica: %v, want ErrNotReplicated", err)
	}
	if !stored(two, "e") {
		t.Fatal("after ErrNotReplicated the primary does not hold the outcome")
	}
	errs, err = two.CompleteBatch(ctx, []storage.Completion{{Key: "f", Token: claim("f"), Value: []byte("v"), Retention: time.Minute}})
	if err != nil || !errors.Is(errs[0], redisstore.ErrNotReplicated) || !stored(two, "f") {
		t.Fatalf("CompleteBatch waiting for 2 of 1 replica: %v %v, want ErrNotReplicated and the outcome stored", errs, err)
	}
	// A lease lost is reported as such, with or without replicas.
	if err := two.Complete(ctx, "e", 1, []byte("v"), time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete with a wrong token: %v, want ErrLeaseLost", err)
	}
}
