package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// policyCheckTimeout bounds New's check of the eviction policy, whatever
// the client's own timeouts and retries: New has no context, and a caller
// must not wait on it for long. A var for the tests.
var policyCheckTimeout = 5 * time.Second

// checkEviction reads the maxmemory-policy of every primary the client
// writes to, with INFO memory (CONFIG GET is often disabled on managed
// Redis), and refuses any policy but noeviction with an
// *EvictionPolicyError. A primary it cannot ask gives an error wrapping
// storage.ErrStoreUnavailable; an INFO reply with no policy, an
// *EvictionPolicyError with no Policy.
func checkEviction(client redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), policyCheckTimeout)
	defer cancel()
	check := func(ctx context.Context, c *redis.Client) error {
		return checkNode(ctx, c, c.Options().Addr)
	}
	send := func() error {
		switch c := client.(type) {
		case *redis.ClusterClient:
			return c.ForEachMaster(ctx, check)
		case *redis.Ring:
			return c.ForEachShard(ctx, check)
		case *redis.Client:
			return check(ctx, c)
		}
		return checkNode(ctx, client, fmt.Sprintf("(a %T)", client))
	}
	verdict, err := await(ctx, send)
	if err == nil {
		err = verdict
	}
	if err == nil {
		return nil
	}
	if _, ok := err.(*EvictionPolicyError); ok {
		return err
	}
	return unavailable(ctx, "New (reading maxmemory-policy with INFO memory)", err)
}

// checkNode checks the policy of the server c sends to, named addr.
func checkNode(ctx context.Context, c redis.Cmdable, addr string) error {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return err
	}
	policy, maxMemory, ok := parsePolicy(info)
	if !ok {
		return &EvictionPolicyError{Addr: addr}
	}
	if policy != "noeviction" {
		return &EvictionPolicyError{Addr: addr, Policy: policy, MaxMemory: maxMemory}
	}
	return nil
}

// parsePolicy returns the maxmemory_policy and maxmemory fields of an
// INFO memory reply; ok is false without the policy.
func parsePolicy(info string) (policy string, maxMemory int64, ok bool) {
	for line := range strings.Lines(info) {
		name, value, found := strings.Cut(strings.TrimSpace(line), ":")
		if !found {
			continue
		}
		switch name {
		case "maxmemory_policy":
			policy, ok = value, value != ""
		case "maxmemory":
			maxMemory, _ = strconv.ParseInt(value, 10, 64)
		}
	}
	return policy, maxMemory, ok
}
