package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// startCluster starts three redis-server primaries of the test's own,
// joins them with redis-cli --cluster create, and waits for
// cluster_state:ok on each. The servers stop when t ends.
func startCluster(t *testing.T) ([]string, []*server) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		unavailableService(t, "redisstore: redis-cli not found: %v", err)
	}
	var addrs []string
	var servers []*server
	for range 3 {
		srv := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		addrs = append(addrs, srv.addr())
		servers = append(servers, srv)
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx := ctxT(t)
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		deadline := time.Now().Add(20 * time.Second)
		for {
			info, _ := c.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("%s: no cluster_state:ok within 20s:\n%s", addr, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return addrs, servers
}

// TestCluster runs the store on a real three-primary Redis Cluster.
func TestCluster(t *testing.T) {
	addrs, servers := startCluster(t)
	pipes := map[string]*counter{} // per node
	var mu sync.Mutex
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: 200 * time.Millisecond, MaxRedirects: 1})
	cc.OnNewNode(func(node *redis.Client) {
		mu.Lock()
		defer mu.Unlock()
		h := &counter{}
		pipes[node.Options().Addr] = h
		node.AddHook(h)
	})
	t.Cleanup(func() { cc.Close() })
	s, err := redisstore.New(cc, redisstore.Config{}) // the servers and their keys go when t ends
	if err != nil {
		t.Fatal(err)
	}

	t.Run("Conformance", func(t *testing.T) {
		idemtest.Run(t, func(t *testing.T) storage.Store { return s })
	})

	t.Run("ClaimBatchOnePipelinePerPrimary", func(t *testing.T) {
		ctx := ctxT(t)
		args := make([]storage.ClaimArgs, 100)
		for i := range args {
			args[i] = claimArgs(fmt.Sprintf("batch-%d", i))
		}
		if _, err := s.ClaimBatch(ctx, args); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		for _, h := range pipes {
			h.reset()
		}
		mu.Unlock()
		for i := range args {
			args[i].Key += "-again"
		}
		got, err := s.ClaimBatch(ctx, args)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range got {
			if c.Err != nil || c.Outcome != storage.Acquired {
				t.Fatalf("entry %d: %v %v", i, c.Outcome, c.Err)
			}
		}
		if n := s.Held(); n != 0 {
			t.Errorf("the Store holds %d records on Cluster, where CompleteBatch completes by token", n)
		}
		mu.Lock()
		defer mu.Unlock()
		total, used := 0, 0
		for addr, h := range pipes {
			cmds, ps := h.seen()
			if len(cmds) != 0 || len(ps) > 1 {
				t.Errorf("node %s got commands %v and pipelines %v for one batch; want at most one pipeline", addr, cmds, ps)
			}
			for _, n := range ps {
				total += n
				used++
			}
		}
		// Each claim of a new key is one plain command, SET … NX PX.
		if total != len(args) || used != 3 {
			t.Fatalf("%d nodes' pipelines held %d commands, want 3 nodes and %d", used, total, len(args))
		}
	})

	t.Run("WaitGroupsByPrimary", func(t *testing.T) {
		// The cluster has no replicas: every WAIT counts 0, and every
		// outcome is stored on its primary.
		ctx := ctxT(t)
		w, err := redisstore.New(cc, redisstore.Config{Prefix: s.Config().Prefix, WaitReplicas: 1, WaitTimeout: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var cs []storage.Completion
		for i := range 12 {
			a := claimArgs(fmt.Sprintf("wait-%d", i))
			c, err := w.Claim(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, storage.Completion{Key: a.Key, Token: c.Token, Value: []byte("v"), Retention: time.Minute})
		}
		errs, err := w.CompleteBatch(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if !errors.Is(e, redisstore.ErrNotReplicated) {
				t.Fatalf("entry %d: %v, want ErrNotReplicated", i, e)
			}
			if r, err := w.Get(ctx, cs[i].Key); err != nil || r.Status != storage.StatusCompleted {
				t.Fatalf("entry %d: %v %v, want Completed on its primary", i, r.Status, err)
			}
		}
		a := claimArgs("wait-single")
		c, _ := w.Claim(ctx, a)
		if err := w.Complete(ctx, a.Key, c.Token, []byte("v"), time.Minute); !errors.Is(err, redisstore.ErrNotReplicated) {
			t.Fatalf("Complete: %v, want ErrNotReplicated", err)
		}
	})

	t.Run("ScriptCacheFlushed", func(t *testing.T) {
		ctx := ctxT(t)
		if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.ScriptFlush(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
		args := make([]storage.ClaimArgs, 30)
		for i := range args {
			args[i] = claimArgs(fmt.Sprintf("flushed-%d", i))
		}
		got, err := s.ClaimBatch(ctx, args)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range got {
			if c.Err != nil || c.Outcome != storage.Acquired {
				t.Fatalf("entry %d after SCRIPT FLUSH: %v %v", i, c.Outcome, c.Err)
			}
		}
	})

	// New reads the policy of every primary: one that may evict is named.
	t.Run("EvictionPolicyOfEachPrimary", func(t *testing.T) {
		ctx := ctxT(t)
		c := redis.NewClient(&redis.Options{Addr: servers[1].addr()})
		defer c.Close()
		if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
			t.Fatal(err)
		}
		defer c.ConfigSet(ctx, "maxmemory-policy", "noeviction")
		_, err := redisstore.New(cc, redisstore.Config{})
		if pe, ok := errors.AsType[*redisstore.EvictionPolicyError](err); !ok || pe.Policy != "allkeys-lru" || pe.Addr != servers[1].addr() {
			t.Fatalf("New with one primary of three under allkeys-lru: %v, want an *EvictionPolicyError naming %s", err, servers[1].addr())
		}
		if _, err := redisstore.New(cc, redisstore.Config{AllowEviction: true}); err != nil {
			t.Fatalf("New with AllowEviction: %v", err)
		}
	})

	// Last, as it stops a primary: a batch that reaches only some nodes
	// answers those, and says which entries got no answer.
	t.Run("PrimaryDown", func(t *testing.T) {
		ctx := ctxT(t)
		args := make([]storage.ClaimArgs, 30)
		for i := range args {
			args[i] = claimArgs(fmt.Sprintf("down-%d", i))
		}
		servers[2].stop()
		got, err := s.ClaimBatch(ctx, args)
		if err != nil {
			t.Fatalf("ClaimBatch with one primary of three down: %v, want per-entry errors", err)
		}
		var acquired, unavailable int
		var cs []storage.Completion
		for i, c := range got {
			switch {
			case c.Err == nil && c.Outcome == storage.Acquired:
				acquired++
				cs = append(cs, storage.Completion{Key: args[i].Key, Token: c.Token, Value: []byte("v"), Retention: time.Minute})
			case errors.Is(c.Err, idem.ErrStoreUnavailable):
				unavailable++
			default:
				t.Fatalf("entry %d: %v %v", i, c.Outcome, c.Err)
			}
		}
		if acquired == 0 || unavailable == 0 {
			t.Fatalf("%d acquired, %d unavailable; want some of each", acquired, unavailable)
		}
		errs, err := s.CompleteBatch(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("completing a claim on a live primary (entry %d): %v", i, err)
			}
		}
	})
}
