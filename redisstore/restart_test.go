package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// TestServerRestart stops a server of the test's own under a live Guard:
// Do fails closed with ErrStoreUnavailable without running fn; once the
// server is back on the same port (empty, its script cache too), the same
// Guard works again.
func TestServerRestart(t *testing.T) {
	srv := startServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g := idemtest.Guard(t, s, idem.Config{Namespace: "restart", StoreTimeout: time.Second})
	ctx := ctxT(t)
	runs := 0
	fn := func(context.Context) ([]byte, error) { runs++; return []byte("charged"), nil }

	if res, err := g.Do(ctx, "order-1", []byte("p"), fn); err != nil || res.Replayed || runs != 1 {
		t.Fatalf("Do before the stop: %+v %v (runs %d)", res, err, runs)
	}

	srv.stop()
	_, err = g.Do(ctx, "order-2", []byte("p"), fn)
	if !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("Do with the server down: %v, want ErrStoreUnavailable", err)
	}
	if runs != 1 {
		t.Fatal("fn ran while the store was down")
	}

	srv.start()
	res, err := g.Do(ctx, "order-2", []byte("p"), fn)
	if err != nil || res.Replayed || runs != 2 {
		t.Fatalf("Do after the restart: %+v %v (runs %d)", res, err, runs)
	}
	res, err = g.Do(ctx, "order-2", []byte("p"), fn)
	if err != nil || !res.Replayed || string(res.Value) != "charged" || runs != 2 {
		t.Fatalf("duplicate after the restart: %+v %v (runs %d), want the replayed value", res, err, runs)
	}

	// The restarted server has forgotten every script: a batch meets
	// NOSCRIPT, and the store sends the script itself.
	batch, err := s.ClaimBatch(ctx, []storage.ClaimArgs{
		{Key: "b1", Lease: time.Minute, Retention: time.Minute},
		{Key: "b2", Lease: time.Minute, Retention: time.Minute},
	})
	if err != nil || batch[0].Outcome != storage.Acquired || batch[1].Outcome != storage.Acquired {
		t.Fatalf("ClaimBatch after the restart: %+v %v, want both acquired", batch, err)
	}
}
