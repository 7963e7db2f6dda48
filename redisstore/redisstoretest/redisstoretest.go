package redisstoretest

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/redisstore"
)

// server is the Redis server of the tests.
var server = testenv.Server{Name: "Redis", Env: "IDEM_REDIS_ADDR", Default: "127.0.0.1:6379"}

// PrefixBase starts every key prefix [Prefix] returns.
const PrefixBase = "idemtest:"

// connectTimeout bounds the first ping; cleanupTimeout the deletion of a
// test's keys.
const (
	connectTimeout = 5 * time.Second
	cleanupTimeout = 30 * time.Second
)

// Addr returns the host:port of the Redis server the tests use: the value
// of IDEM_REDIS_ADDR, or 127.0.0.1:6379.
func Addr() string { return server.Addr() }

// Client returns a client of the server at [Addr], closed when tb ends.
// When the server cannot be reached it skips tb, or fails it under
// IDEM_REQUIRE_SERVICES=1.
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	addr := Addr()
	// One ping without go-redis's retries, so that a missing server is
	// reported at once.
	probe := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	err := probe.Ping(ctx).Err()
	cancel()
	probe.Close()
	if err != nil {
		server.Unreachable(tb, addr, err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { c.Close() })
	return c
}

// Prefix returns a key prefix of tb's own, idemtest:<random>:, and deletes
// the keys under it through c when tb ends. c must stay open until then (a
// [Client] made before Prefix is closed after it).
func Prefix(tb testing.TB, c redis.UniversalClient) string {
	tb.Helper()
	prefix := PrefixBase + rand.Text()[:16] + ":"
	deleteOnCleanup(tb, c, prefix)
	return prefix
}

// Store returns a store over c under cfg.Prefix, or a [Prefix] of tb's own
// when cfg.Prefix is empty; cfg's other fields are passed on to
// [redisstore.New]. The keys under the prefix are deleted when tb ends.
func Store(tb testing.TB, c redis.UniversalClient, cfg redisstore.Config) *redisstore.Store {
	tb.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = Prefix(tb, c)
	} else {
		deleteOnCleanup(tb, c, cfg.Prefix)
	}
	s, err := redisstore.New(c, cfg)
	if err != nil {
		tb.Fatalf("redisstoretest: redisstore.New: %v", err)
	}
	return s
}

// deleteOnCleanup deletes the keys under prefix when tb ends, on every
// primary. A failure is only logged: it leaves keys behind, not a wrong
// result, and a test that stopped its server on purpose cannot delete.
func deleteOnCleanup(tb testing.TB, c redis.UniversalClient, prefix string) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		del := func(ctx context.Context, c *redis.Client) error { return deleteKeys(ctx, c, prefix) }
		var err error
		switch c := c.(type) {
		case *redis.Client:
			err = del(ctx, c)
		case *redis.ClusterClient:
			err = c.ForEachMaster(ctx, del)
		case *redis.Ring:
			err = c.ForEachShard(ctx, del)
		default:
			err = fmt.Errorf("a %T: cannot list its nodes", c)
		}
		if err != nil {
			tb.Logf("redisstoretest: deleting the test's keys %s*: %v", prefix, err)
		}
	})
}

// deleteKeys deletes the keys under prefix on the node of c.
func deleteKeys(ctx context.Context, c *redis.Client, prefix string) error {
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
			keys = keys[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(keys) > 0 {
		return c.Unlink(ctx, keys...).Err()
	}
	return nil
}
