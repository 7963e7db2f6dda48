package redisstore_test

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// dropProxy forwards connections to a Redis server. Armed, it swallows the
// next reply the server sends and cuts that connection: the command ran,
// its client never learns how.
type dropProxy struct {
	*proxy
	armed atomic.Bool
}

func startDropProxy(t *testing.T, target string) *dropProxy {
	p := &dropProxy{}
	p.proxy = startProxy(t, target, relay, p.down)
	return p
}

// down relays the server's replies to the client, but for the one it is
// armed for.
func (p *dropProxy) down(client, server net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && p.armed.CompareAndSwap(true, false) {
			client.Close()
			server.Close()
			return
		}
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			client.Close()
			return
		}
	}
}

// TestLostReply: go-redis resends a command whose reply it lost. A resent
// claim must still answer Acquired; a Complete must not be resent, or it
// would answer ErrLeaseLost for the value it stored.
func TestLostReply(t *testing.T) {
	direct := sharedClient(t)
	proxy := startDropProxy(t, redisAddr())
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.addr(), MaxRetries: 3, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond})
	t.Cleanup(func() { viaProxy.Close() })
	s := newStore(t, viaProxy, redisstore.Config{})
	check := newStore(t, direct, redisstore.Config{Prefix: s.Config().Prefix})
	ctx := ctxT(t)
	// arm makes the proxy drop the next reply once a pooled connection is
	// ready (go-redis pools pipelines apart), so the reply dropped is the
	// next command's, not a connection handshake's.
	arm := func() {
		t.Helper()
		if err := viaProxy.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := viaProxy.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
			t.Fatal(err)
		}
		proxy.armed.Store(true)
	}

	// Cache the scripts first: a lost NOSCRIPT reply would prove nothing.
	warm, err := s.Claim(ctx, claimArgs("warm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, warm.Record.Key, warm.Token, nil, time.Minute); err != nil {
		t.Fatal(err)
	}

	a := claimArgs("claim")
	arm()
	c, err := s.Claim(ctx, a)
	if proxy.armed.Load() {
		t.Fatal("the proxy dropped no reply")
	}
	if err != nil || c.Outcome != storage.Acquired || c.Record.Attempt != 1 {
		t.Fatalf("claim resent after a lost reply: %v attempt %d %v, want Acquired attempt 1", c.Outcome, c.Record.Attempt, err)
	}
	if r, _ := check.Get(ctx, a.Key); r.Token != c.Token {
		t.Fatalf("the store holds token %d, the claim answered %d", r.Token, c.Token)
	}

	arm()
	err = s.Complete(ctx, a.Key, c.Token, []byte("v"), time.Minute)
	if !errors.Is(err, idem.ErrStoreUnavailable) || errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete with a lost reply: %v, want ErrStoreUnavailable (not resent)", err)
	}
	if r, _ := check.Get(ctx, a.Key); r.Status != storage.StatusCompleted || string(r.Result) != "v" {
		t.Fatalf("after the lost reply the record is %v %q, want Completed \"v\"", r.Status, r.Result)
	}

	// The same holds for the pipelines.
	b := claimArgs("batch")
	arm()
	got, err := s.ClaimBatch(ctx, []storage.ClaimArgs{b, b})
	if err != nil || got[0].Outcome != storage.Acquired || got[1].Outcome != storage.Busy {
		t.Fatalf("ClaimBatch resent after a lost reply: %+v %v, want Acquired then Busy", got, err)
	}
	arm()
	errs, err := s.CompleteBatch(ctx, []storage.Completion{{Key: b.Key, Token: got[0].Token, Value: []byte("v"), Retention: time.Minute}})
	if !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("CompleteBatch with a lost reply: %v %v, want ErrStoreUnavailable (not resent)", errs, err)
	}
	if r, _ := check.Get(ctx, b.Key); r.Status != storage.StatusCompleted {
		t.Fatalf("after the lost batch reply the record is %v, want Completed", r.Status)
	}
}
