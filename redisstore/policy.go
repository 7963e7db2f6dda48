package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/storage"
)

// policyCheckTimeout bounds New's check of the eviction policy, whatever
// the client's own timeouts and retries: New has no context, and a caller
// must not wait on it for long. A var for the tests.
var policyCheckTimeout = 5 * time.Second

// policyCheckInterval is how often a Store reads the eviction policy again
// while it runs: a CONFIG SET maxmemory-policy, or a failover to a primary
// configured otherwise, is seen by the claims that follow within it. One
// INFO memory per primary every 10 s costs Redis nothing it would notice.
const policyCheckInterval = 10 * time.Second

// policyWatch reads the eviction policy again while the Store runs, on
// the claims' path: the first claim after policyCheckInterval has passed
// checks it (one round trip, under the claim's context), and every claim
// fails closed while the last check found a policy that may evict. A
// Store has no goroutine of its own, and nothing to protect while it
// claims nothing.
type policyWatch struct {
	client redis.UniversalClient
	logger *slog.Logger
	every  time.Duration

	next     atomic.Int64 // Unix nanoseconds of the next check
	checking atomic.Bool
	unsafe   atomic.Pointer[EvictionPolicyError] // set by the last check that read a policy
}

func newPolicyWatch(client redis.UniversalClient, logger *slog.Logger) *policyWatch {
	w := &policyWatch{client: client, logger: logger, every: policyCheckInterval}
	w.next.Store(time.Now().Add(w.every).UnixNano())
	return w
}

// err checks the policy again when it is due, and returns the error of
// op while the policy may evict: it wraps storage.ErrStoreUnavailable
// (the store cannot promise that a duplicate is seen, so nothing runs)
// and the *EvictionPolicyError that names the policy.
func (w *policyWatch) err(ctx context.Context, op string) error {
	if w == nil {
		return nil
	}
	if now := time.Now(); now.UnixNano() >= w.next.Load() && w.checking.CompareAndSwap(false, true) {
		w.next.Store(now.Add(w.every).UnixNano())
		w.check(ctx)
		w.checking.Store(false)
	}
	if pe := w.unsafe.Load(); pe != nil {
		return fmt.Errorf("redisstore: %s: %w: %w", op, storage.ErrStoreUnavailable, pe)
	}
	return nil
}

// check reads the policy and keeps the verdict, logging a change. A
// server it cannot ask leaves the last verdict as it was: the claim that
// follows meets the same server.
func (w *policyWatch) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, policyCheckTimeout)
	defer cancel()
	err := checkPolicies(ctx, w.client)
	pe, unsafe := errors.AsType[*EvictionPolicyError](err)
	if err != nil && !unsafe {
		return
	}
	if unsafe {
		if w.unsafe.Swap(pe) == nil {
			w.logger.Error("redisstore: claims fail until maxmemory-policy is noeviction again (or Config.AllowEviction is set)",
				"addr", pe.Addr, "maxmemory_policy", pe.Policy, "error", pe.Error())
		}
		return
	}
	if w.unsafe.Swap(nil) != nil {
		w.logger.Warn("redisstore: maxmemory-policy is noeviction again; claims go on")
	}
}

// checkEviction reads the maxmemory-policy of every primary the client
// writes to, with INFO memory (CONFIG GET is often disabled on managed
// Redis), and refuses any policy but noeviction with an
// *EvictionPolicyError. A primary it cannot ask gives an error wrapping
// storage.ErrStoreUnavailable; an INFO reply with no policy, an
// *EvictionPolicyError with no Policy.
func checkEviction(client redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), policyCheckTimeout)
	defer cancel()
	err := checkPolicies(ctx, client)
	if err == nil {
		return nil
	}
	if _, ok := err.(*EvictionPolicyError); ok {
		return err
	}
	return unavailable(ctx, "New (reading maxmemory-policy with INFO memory)", err)
}

// checkPolicies reads the policy of every primary, as checkEviction says,
// under ctx, and returns the first *EvictionPolicyError, or the client's
// error.
func checkPolicies(ctx context.Context, client redis.UniversalClient) error {
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
	return err
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
