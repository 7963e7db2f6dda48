package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// evictingPolicies are every maxmemory-policy of Redis 7.0 but
// noeviction: each may evict an idempotency record, whose key has a TTL.
var evictingPolicies = []string{
	"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
	"allkeys-lru", "allkeys-lfu", "allkeys-random",
}

// TestNewRefusesEvictingPolicies starts a server of the test's own with
// maxmemory and each policy: New refuses every policy that may evict,
// with an *EvictionPolicyError that names it, accepts it with
// AllowEviction, and accepts noeviction.
func TestNewRefusesEvictingPolicies(t *testing.T) {
	t.Parallel()
	for _, policy := range append([]string{"noeviction"}, evictingPolicies...) {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, "--maxmemory", "64mb", "--maxmemory-policy", policy)
			c := redis.NewClient(&redis.Options{Addr: srv.addr()})
			t.Cleanup(func() { c.Close() })
			s, err := redisstore.New(c, redisstore.Config{})
			if policy == "noeviction" {
				if err != nil {
					t.Fatalf("New under noeviction: %v", err)
				}
				if _, err := s.Claim(ctxT(t), storage.ClaimArgs{Key: "k", Lease: time.Minute, Retention: time.Minute}); err != nil {
					t.Fatal(err)
				}
				return
			}
			pe, ok := errors.AsType[*redisstore.EvictionPolicyError](err)
			if s != nil || !ok || pe.Policy != policy || pe.MaxMemory != 64<<20 || pe.Addr != srv.addr() {
				t.Fatalf("New under %s: %v, %v; want no store and an *EvictionPolicyError naming the policy", policy, s, err)
			}
			if errors.Is(err, idem.ErrStoreUnavailable) {
				t.Errorf("the refusal %v wraps ErrStoreUnavailable: it is no outage, a retry will not help", err)
			}
			if s, err := redisstore.New(c, redisstore.Config{AllowEviction: true}); err != nil || s == nil {
				t.Fatalf("New under %s with AllowEviction: %v", policy, err)
			}
		})
	}
}

// TestNewRefusesEvictionWithoutMaxmemory: with no maxmemory (0) the server
// evicts nothing yet, but maxmemory can be set at run time and the policy
// then applies: New refuses the policy all the same, and accepts the
// server once its policy is noeviction.
func TestNewRefusesEvictionWithoutMaxmemory(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--maxmemory", "0", "--maxmemory-policy", "volatile-lru")
	c := redis.NewClient(&redis.Options{Addr: srv.addr()})
	t.Cleanup(func() { c.Close() })
	_, err := redisstore.New(c, redisstore.Config{})
	if pe, ok := errors.AsType[*redisstore.EvictionPolicyError](err); !ok || pe.Policy != "volatile-lru" || pe.MaxMemory != 0 {
		t.Fatalf("New under volatile-lru with no maxmemory: %v, want an *EvictionPolicyError", err)
	}
	if err := c.ConfigSet(ctxT(t), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := redisstore.New(c, redisstore.Config{}); err != nil {
		t.Fatalf("New once the policy is noeviction: %v", err)
	}
}

// TestNewWithoutServer: New cannot check a server that is not there, and
// does not pass it: it returns at once an error wrapping
// ErrStoreUnavailable (a retry of New will succeed once Redis is up), and
// no store. With AllowEviction it makes no round trip, and succeeds.
func TestNewWithoutServer(t *testing.T) {
	t.Parallel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))) // nothing listens
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Config{})
	if s != nil || !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("New with no server: %v, %v; want no store and ErrStoreUnavailable", s, err)
	}
	if _, ok := errors.AsType[*redisstore.EvictionPolicyError](err); ok {
		t.Fatalf("New with no server: %v, an *EvictionPolicyError", err)
	}
	if s, err := redisstore.New(c, redisstore.Config{AllowEviction: true}); err != nil || s == nil {
		t.Fatalf("New with no server and AllowEviction: %v", err)
	}
}

// TestNewServerSilent: a server that accepts the connection and never
// answers holds New for its bound at most (here 200 ms, 5 s by default),
// then New returns ErrStoreUnavailable with the deadline in its chain.
func TestNewServerSilent(t *testing.T) {
	redisstore.SetPolicyCheckTimeout(t, 200*time.Millisecond) // not parallel: it sets a package variable
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- conn // kept open, never answered
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		close(accepted)
		for conn := range accepted {
			conn.Close()
		}
	})
	c := redis.NewClient(&redis.Options{Addr: l.Addr().String(), ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	start := time.Now()
	_, err = redisstore.New(c, redisstore.Config{})
	if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("New against a silent server: %v, want ErrStoreUnavailable and DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("New against a silent server returned after %v", elapsed)
	}
}

// TestEvictionPolicyIsCheckedWhileRunning: a policy changed after New
// (CONFIG SET on a server of the test's own) is seen by the claims that
// follow within the check interval: Claim and ClaimBatch fail closed with
// an error wrapping ErrStoreUnavailable and the *EvictionPolicyError
// naming the policy, logged once however many claims fail; Complete of a
// claim made before goes on; once the policy is noeviction again, claims
// go on. A Store with AllowEviction never checks.
func TestEvictionPolicyIsCheckedWhileRunning(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	c := redis.NewClient(&redis.Options{Addr: srv.addr()})
	t.Cleanup(func() { c.Close() })
	var logs bytes.Buffer // the check runs on the claiming goroutine: the test's
	s, err := redisstore.New(c, redisstore.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	allowing, err := redisstore.New(c, redisstore.Config{AllowEviction: true, Prefix: "allowing:"})
	if err != nil {
		t.Fatal(err)
	}
	const every = 20 * time.Millisecond
	s.SetPolicyCheckInterval(every)
	ctx := ctxT(t)
	args := func(key string) storage.ClaimArgs {
		return storage.ClaimArgs{Key: key, Lease: time.Minute, Retention: time.Minute}
	}
	before, err := s.Claim(ctx, args("before"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	refused := func(op string, err error) bool {
		pe, ok := errors.AsType[*redisstore.EvictionPolicyError](err)
		return ok && pe.Policy == "allkeys-lru" && errors.Is(err, idem.ErrStoreUnavailable) && strings.Contains(err.Error(), "allkeys-lru")
	}
	var claimErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(every) {
		if _, claimErr = s.Claim(ctx, args("after")); claimErr != nil {
			break
		}
	}
	if !refused("Claim", claimErr) {
		t.Fatalf("Claim after CONFIG SET maxmemory-policy allkeys-lru: %v; want ErrStoreUnavailable and an *EvictionPolicyError naming the policy", claimErr)
	}
	for range 3 {
		if _, err := s.Claim(ctx, args("after")); !refused("Claim", err) {
			t.Fatalf("Claim again: %v", err)
		}
		if _, err := s.ClaimBatch(ctx, []storage.ClaimArgs{args("batch")}); !refused("ClaimBatch", err) {
			t.Fatalf("ClaimBatch: %v", err)
		}
		time.Sleep(every)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("the policy was logged %d times, want once:\n%s", n, logs.String())
	}
	if err := s.Complete(ctx, "before", before.Token, []byte("done"), time.Minute); err != nil {
		t.Errorf("Complete of a claim made before: %v", err)
	}
	if _, err := allowing.Claim(ctx, args("allowed")); err != nil {
		t.Errorf("Claim of a Store with AllowEviction: %v", err)
	}

	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(every) {
		if _, claimErr = s.Claim(ctx, args("after")); claimErr == nil {
			break
		}
	}
	if claimErr != nil {
		t.Fatalf("Claim once the policy is noeviction again: %v", claimErr)
	}
}
