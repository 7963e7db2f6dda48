package natspub_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/natspub"
	"github.com/idemgo/idem/outbox/outboxtest"
)

// startServer starts a JetStream server of the test's own on port (0: any
// free one) with its store in dir, and returns it.
func startServer(t *testing.T, port int, dir string) *server.Server {
	t.Helper()
	if port == 0 {
		port = server.RANDOM_PORT
	}
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("the NATS server did not start")
	}
	return ns
}

func stopServer(ns *server.Server) {
	ns.Shutdown()
	ns.WaitForShutdown()
}

// TestRelaysThroughABrokerRestart: two relays share a table while writers
// enqueue 1,000 messages over 20 keys; in the middle the NATS server stops,
// the relays back off, and a new server starts on the same port and store.
// The stream ends up with every message, each key's in order.
func TestRelaysThroughABrokerRestart(t *testing.T) {
	dir := t.TempDir()
	ns := startServer(t, 0, dir)
	port := ns.Addr().(*net.TCPAddr).Port
	stopped := false
	t.Cleanup(func() { // last: after the relays and connections closed
		if !stopped {
			stopServer(ns)
		}
	})
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)

	admin := connect(t, url, nats.ReconnectWait(20*time.Millisecond))
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{Storage: jetstream.FileStorage})
	dest := prefix + ".orders"

	pool := outboxtest.Pool(t, 12)
	table := outboxtest.Table(t, pool)
	var published, backoffs [2]atomic.Int64
	for i := range 2 {
		pub, err := natspub.New(connect(t, url, nats.ReconnectWait(20*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{
			Table:             table,
			BatchSize:         50,
			RebalanceInterval: 50 * time.Millisecond,
			MinBackoff:        10 * time.Millisecond,
			MaxBackoff:        200 * time.Millisecond,
			Observer: func(_ context.Context, e outbox.Event) {
				switch e.Op {
				case outbox.OpPublish:
					published[i].Add(int64(e.Sent))
				case outbox.OpBackoff:
					backoffs[i].Add(1)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		outboxtest.RunRelay(t, relay)
	}

	msgs, want := outboxtest.Messages(1000, 20, dest)
	var writers sync.WaitGroup
	writers.Go(func() { outboxtest.Enqueue(t, pool, table, msgs, 8) })

	awaitCond(t, "300 messages published", func() bool { return published[0].Load()+published[1].Load() >= 300 })
	stopServer(ns)
	stopped = true
	awaitCond(t, "both relays backing off", func() bool { return backoffs[0].Load() > 0 && backoffs[1].Load() > 0 })
	ns = startServer(t, port, dir)
	stopped = false
	writers.Wait()
	outboxtest.AwaitPending(t, pool, table, 0)
	if published[0].Load() == 0 || published[1].Load() == 0 {
		t.Errorf("relays published %d and %d messages, want both to take part", published[0].Load(), published[1].Load())
	}

	got := subscribe(t, admin, stream, dest)
	ids := make([]string, 0, len(msgs))
	ctx, cancel := context.WithTimeout(context.Background(), outboxtest.Timeout)
	defer cancel()
	s, err := admin.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for range s.CachedInfo().State.Msgs {
		select {
		case r := <-got:
			ids = append(ids, r.ID)
		case <-ctx.Done():
			t.Fatalf("read %d of %d messages of the stream", len(ids), s.CachedInfo().State.Msgs)
		}
	}
	dups := outboxtest.CheckOrder(t, want, ids)
	t.Logf("stream: %d messages, %d of them duplicates; relays: %d and %d published, %d and %d backoffs",
		len(ids), dups, published[0].Load(), published[1].Load(), backoffs[0].Load(), backoffs[1].Load())
}

// awaitCond waits until cond holds, or fails t after outboxtest.Timeout.
func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(outboxtest.Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, outboxtest.Timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
