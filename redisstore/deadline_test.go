package redisstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// freezeProxy forwards connections to a Redis server until it is frozen:
// from then on it forwards nothing, either way, on any connection, old or
// new, as a server that stopped answering would; the connections stay
// open until the proxy closes.
type freezeProxy struct {
	*proxy
	frozen atomic.Bool
}

func startFreezeProxy(t *testing.T, target string) *freezeProxy {
	p := &freezeProxy{}
	p.proxy = startProxy(t, target, p.forward, p.forward)
	return p
}

func (p *freezeProxy) freeze() { p.frozen.Store(true) }

// forward copies src to dst until the proxy freezes, then holds whatever
// it read until the proxy closes.
func (p *freezeProxy) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if p.frozen.Load() {
			<-p.done
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

// TestCallsEndWithTheirContext: against a Redis that stops answering,
// every call returns within its context's deadline and promptly when its
// context is cancelled, whatever the client's options, and the error
// wraps idem.ErrStoreUnavailable and the context's error. The go-redis
// defaults (what redis.ParseURL gives: ContextTimeoutEnabled false, a 3s
// ReadTimeout, retries) once held a call for seconds.
func TestCallsEndWithTheirContext(t *testing.T) {
	sharedClient(t) // skips without a server, or fails under IDEM_REQUIRE_SERVICES=1
	const (
		deadline = 300 * time.Millisecond
		cancelAt = 100 * time.Millisecond
		slack    = 700 * time.Millisecond // scheduling on a shared machine, -race
	)
	clients := map[string]func(addr string) *redis.Options{
		"ParseURL": func(addr string) *redis.Options {
			opt, err := redis.ParseURL("redis://" + addr)
			if err != nil {
				t.Fatal(err)
			}
			return opt
		},
		"ContextTimeoutEnabled": func(addr string) *redis.Options {
			return &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
		},
	}
	calls := map[string]func(ctx context.Context, s *redisstore.Store) error{
		"Claim": func(ctx context.Context, s *redisstore.Store) error {
			_, err := s.Claim(ctx, claimArgs("k"))
			return err
		},
		"ClaimBatch": func(ctx context.Context, s *redisstore.Store) error {
			_, err := s.ClaimBatch(ctx, []storage.ClaimArgs{claimArgs("k"), claimArgs("l")})
			return err
		},
		"Complete": func(ctx context.Context, s *redisstore.Store) error {
			return s.Complete(ctx, "k", 1, []byte("v"), time.Minute)
		},
		"Fail": func(ctx context.Context, s *redisstore.Store) error {
			return s.Fail(ctx, "k", 1, []byte("v"), time.Minute)
		},
		"CompleteBatch": func(ctx context.Context, s *redisstore.Store) error {
			_, err := s.CompleteBatch(ctx, []storage.Completion{{Key: "k", Token: 1, Value: []byte("v"), Retention: time.Minute}})
			return err
		},
		"Release": func(ctx context.Context, s *redisstore.Store) error { return s.Release(ctx, "k", 1) },
		"Extend":  func(ctx context.Context, s *redisstore.Store) error { return s.Extend(ctx, "k", 1, time.Minute) },
		"Get": func(ctx context.Context, s *redisstore.Store) error {
			_, err := s.Get(ctx, "k")
			return err
		},
		"Delete": func(ctx context.Context, s *redisstore.Store) error { return s.Delete(ctx, "k") },
	}
	for clientName, options := range clients {
		for _, waitReplicas := range []int{0, 1} {
			name := clientName
			if waitReplicas > 0 {
				name += "/WaitReplicas"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				proxy := startFreezeProxy(t, redisAddr())
				c := redis.NewClient(options(proxy.addr()))
				t.Cleanup(func() { c.Close() })
				t.Cleanup(proxy.close) // first: ends the calls left waiting on the frozen server
				// Nothing reaches the server once the proxy froze, so there
				// are no keys to clean up (and no way to).
				s, err := redisstore.New(c, redisstore.Config{Prefix: randomPrefix(t), WaitReplicas: waitReplicas, WaitTimeout: 50 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Get(ctxT(t), "warm up"); !errors.Is(err, storage.ErrNotFound) {
					t.Fatalf("Get through the proxy before it froze: %v", err)
				}
				proxy.freeze()
				// The calls run at once (the test's parallelism is the
				// machine's cores): each must end with its own context.
				var wg sync.WaitGroup
				for callName, call := range calls {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), deadline)
						defer cancel()
						start := time.Now()
						err := call(ctx, s)
						if took := time.Since(start); took > deadline+slack {
							t.Errorf("%s: returned %v after the call, its deadline was %v", callName, took, deadline)
						}
						if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("%s with a deadline: error %v, want idem.ErrStoreUnavailable and context.DeadlineExceeded", callName, err)
						}
					})
					wg.Go(func() {
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						cancelled := time.AfterFunc(cancelAt, cancel)
						defer cancelled.Stop()
						start := time.Now()
						err := call(ctx, s)
						if took := time.Since(start); took > cancelAt+slack {
							t.Errorf("%s: returned %v after the call, its context was cancelled at %v", callName, took, cancelAt)
						}
						if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.Is(err, context.Canceled) {
							t.Errorf("%s cancelled: error %v, want idem.ErrStoreUnavailable and context.Canceled", callName, err)
						}
					})
				}
				wg.Wait()
			})
		}
	}
}

// TestNewRefusesClientsThatWaitForever: a call returns when its context
// ends and leaves its command to the client, so New refuses a client whose
// timeouts would let that command wait for a silent server forever, and
// names the option.
func TestNewRefusesClientsThatWaitForever(t *testing.T) {
	addr := redisAddr()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		field  string // "" when New must accept the client
	}{
		{"defaults", redis.NewClient(&redis.Options{Addr: addr}), ""},
		{"ContextTimeoutEnabled", redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}), ""},
		{"ReadTimeout -1", redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1}), "ReadTimeout and WriteTimeout"}, // WriteTimeout follows
		{"WriteTimeout -1", redis.NewClient(&redis.Options{Addr: addr, WriteTimeout: -1}), "WriteTimeout"},
		{"ReadTimeout -2", redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -2, WriteTimeout: time.Second}), "ReadTimeout"},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}}), ""},
		{"cluster ReadTimeout -1", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ReadTimeout: -1, WriteTimeout: time.Second}), "ReadTimeout"},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}}), ""},
		{"ring WriteTimeout -2", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, WriteTimeout: -2}), "WriteTimeout"},
	} {
		t.Cleanup(func() { tc.client.Close() })
		_, err := redisstore.New(tc.client, redisstore.Config{AllowEviction: true}) // options only: no round trip
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: New: %v, want the client accepted", tc.name, err)
		case tc.field != "" && (err == nil || !strings.Contains(err.Error(), "the client's "+tc.field+" lets")):
			t.Errorf("%s: New: %v, want an error naming %s", tc.name, err, tc.field)
		}
	}
}
