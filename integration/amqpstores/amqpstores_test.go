package amqpstores_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemamqp"
	"github.com/idemgo/idem/idemamqp/idemamqptest"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	goleak.VerifyTestMain(m)
}

// Every case of the suite has a Guard in a namespace of its own, so the
// cases share one store.

func TestAMQPRedis(t *testing.T) {
	s := redisstoretest.Store(t, redisstoretest.Client(t), redisstore.Config{})
	idemamqptest.Run(t, func(*testing.T) storage.Store { return s })
}

func TestAMQPPostgres(t *testing.T) {
	s := pgstoretest.Store(t, pgstoretest.Pool(t, 0), pgstore.Config{})
	idemamqptest.Run(t, func(*testing.T) storage.Store { return s })
}

// The child process's configuration, in its environment.
const (
	childEnv       = "IDEMAMQP_CHILD"        // "redis <prefix>" or "postgres <table>"
	childQueue     = "IDEMAMQP_CHILD_QUEUE"  // the queue
	childNamespace = "IDEMAMQP_CHILD_NS"     // the Guard's namespace
	childLedger    = "IDEMAMQP_CHILD_LEDGER" // the file of effects
	childStall     = "IDEMAMQP_CHILD_STALL"  // the key whose handler never returns
)

// The kill test's Guard lease and busy delay, parent and child: with one
// busy delay they share one delay queue, which the test deletes.
const (
	killLease     = 2 * time.Second
	killBusyDelay = 200 * time.Millisecond
)

// TestKilledMidHandler runs a consumer in a child process over a real store
// and kills it with SIGKILL while a handler holds a key. The broker
// delivers what it had not acked to a consumer in this process, which
// finds the dead consumer's key busy until its lease ends, takes it over
// then, and runs every message once.
func TestKilledMidHandler(t *testing.T) {
	for _, kind := range []string{"redis", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var (
				store storage.Store
				where string
			)
			switch kind {
			case "redis":
				s := redisstoretest.Store(t, redisstoretest.Client(t), redisstore.Config{})
				store, where = s, s.Config().Prefix
			case "postgres":
				s := pgstoretest.Store(t, pgstoretest.Pool(t, 0), pgstore.Config{})
				store, where = s, strings.ReplaceAll(s.Table(), `"`, "") // pgstore.Config.Table is unquoted
			}
			conn := idemamqptest.Connect(t)
			q := idemamqptest.NewQueue(t, conn, idemamqptest.Quorum, nil)
			ledger := ledgerFile(t)
			ks := make([]string, 50)
			msgs := make([]idemamqptest.Msg, len(ks))
			for i := range ks {
				ks[i] = fmt.Sprintf("order-%04d", i)
				msgs[i] = idemamqptest.Msg{Key: ks[i], Body: ks[i]}
			}
			stall := ks[25]
			q.Publish(msgs...)
			ns := "idemamqp-kill-" + rand.Text()

			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+kind+" "+where, childQueue+"="+q.Name,
				childNamespace+"="+ns, childLedger+"="+ledger, childStall+"="+stall)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			holding, gone := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(gone)
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if sc.Text() == "holding "+stall {
						close(holding)
					}
				}
			}()
			select {
			case <-holding:
			case <-gone:
				t.Fatal("the child exited before it reached the stalled key")
			case <-time.After(60 * time.Second):
				t.Fatal("the child did not reach the stalled key within a minute")
			}
			t.Logf("the child holds %s; SIGKILL", stall)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
			before := countEffects(t, ledger)
			if len(before) != 25 || before[stall] != 0 {
				t.Fatalf("the child charged %d keys before it was killed (the stalled one %d times), want the 25 before it",
					len(before), before[stall])
			}

			g := idemtest.Guard(t, store, idem.Config{Namespace: ns, Lease: killLease})
			ev := &idemamqptest.Events{}
			idemamqptest.Start(t, q, idemamqptest.NewConsumer(t, g, q, ev, appendEffect(ledger),
				idemamqp.WithBusyDelay(killBusyDelay)))
			idemamqptest.Eventually(t, 60*time.Second, "every message acked", func() bool {
				return ev.Kind(idemamqp.EventAcked) >= len(ks)-25
			})

			t.Logf("every message acked: %d trips through the delay queue", ev.Kind(idemamqp.EventDelayed))
			effects := countEffects(t, ledger)
			for _, k := range ks {
				if effects[k] != 1 {
					t.Errorf("key %s: %d effects, want 1", k, effects[k])
				}
			}
			rec, err := store.Get(context.Background(), g.ScopedStoreKey("", stall))
			if err != nil || rec.Status != storage.StatusCompleted || rec.Attempt != 2 {
				t.Errorf("the stalled key's record: %+v, %v; want completed at the second attempt (a takeover)", rec, err)
			}
			redelivered := ev.Count(func(e idemamqp.Event) bool { return e.Key == stall && e.Redelivered })
			if redelivered == 0 {
				t.Errorf("the stalled key's message was not seen redelivered: %+v", ev.Of(idemamqp.EventAcked))
			}
		})
	}
}

// ledgerFile returns the path of an empty file of effects.
func ledgerFile(t *testing.T) string {
	t.Helper()
	p := t.TempDir() + "/effects"
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// appendEffect is a handler whose effect is a line with the key appended
// to the file path, which is shared with the child process: one write of
// a few bytes with O_APPEND, whole or not at all.
func appendEffect(path string) idemamqp.Handler {
	return func(ctx context.Context, d amqp.Delivery) error {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		key, _ := d.Headers["idempotency-key"].(string)
		_, err = f.WriteString(key + "\n")
		return errors.Join(err, f.Close())
	}
}

// countEffects reads the file of effects.
func countEffects(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for line := range strings.Lines(string(b)) {
		n[strings.TrimSuffix(line, "\n")]++
	}
	return n
}

// child runs the consumer of the kill test until it is killed: handlers
// one at a time, the stalled key's printing "holding <key>" and blocking
// once the deliveries handled before it are acked (their outcomes stored:
// the consumer stores outcomes behind its handlers), so that the kill
// finds no handler's effect without its outcome. It also holds the keys
// it claimed ahead for the deliveries behind the stalled one.
func child() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	ctx := context.Background()
	kind, where, _ := strings.Cut(os.Getenv(childEnv), " ")
	var store storage.Store
	switch kind {
	case "redis":
		s, err := redisstore.New(redis.NewClient(&redis.Options{Addr: redisstoretest.Addr()}), redisstore.Config{Prefix: where})
		if err != nil {
			return fail(err)
		}
		store = s
	case "postgres":
		pool, err := pgxpool.New(ctx, pgstoretest.URL())
		if err != nil {
			return fail(err)
		}
		s, err := pgstore.New(pool, pgstore.Config{Table: where})
		if err != nil {
			return fail(err)
		}
		store = s
	default:
		return fail(fmt.Errorf("%s=%q", childEnv, os.Getenv(childEnv)))
	}
	g, err := idem.New(store, idem.Config{Namespace: os.Getenv(childNamespace), Lease: killLease})
	if err != nil {
		return fail(err)
	}
	stall, effect := os.Getenv(childStall), appendEffect(os.Getenv(childLedger))
	var handled, acked atomic.Int64
	ack := make(chan struct{}, 1)
	h := func(ctx context.Context, d amqp.Delivery) error {
		if d.Headers["idempotency-key"] == stall {
			for acked.Load() < handled.Load() {
				<-ack
			}
			fmt.Println("holding " + stall)
			select {} // until SIGKILL
		}
		handled.Add(1)
		return effect(ctx, d)
	}
	observe := func(_ context.Context, e idemamqp.Event) {
		if e.Kind == idemamqp.EventAcked {
			acked.Add(1)
			select {
			case ack <- struct{}{}:
			default:
			}
		}
	}
	c, err := idemamqp.New(g, idemamqptest.URL(), os.Getenv(childQueue), h, idemamqp.WithSharedScope(), idemamqp.WithDiscardPoison(),
		idemamqp.WithConcurrency(1), idemamqp.WithPrefetch(8), idemamqp.WithBusyDelay(killBusyDelay), idemamqp.WithObserver(observe))
	if err != nil {
		return fail(err)
	}
	return fail(fmt.Errorf("Run returned: %v", c.Run(ctx)))
}
