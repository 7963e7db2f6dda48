package natsstores_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemnats"
	"github.com/idemgo/idem/idemnats/idemnatstest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

// The environment of the consumer process TestKilledConsumer starts: the
// test binary itself, which runs runChild instead of the tests.
const (
	childEnv       = "IDEMNATS_TEST_CHILD" // the stream's name
	childPrefixEnv = "IDEMNATS_TEST_PREFIX"
	childVictimEnv = "IDEMNATS_TEST_VICTIM"
)

// The settings the child and the test's own consumer share.
const (
	killLease     = time.Second
	killNamespace = "kill"
	killBatch     = 8
)

// killHandler counts the effect of a message in Redis: INCR of the key's
// counter, where every process sees it.
func killHandler(rdb *redis.Client, prefix string) idemnats.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		return rdb.Incr(ctx, prefix+"effects:"+msg.Headers().Get(jetstream.MsgIDHeader)).Err()
	}
}

func newKillConsumer(g *idem.Guard, cons jetstream.Consumer, h idemnats.Handler) (*idemnats.Consumer, error) {
	return idemnats.New(g, cons, h, idemnats.WithSharedScope(), idemnats.WithDiscardPoison(), idemnats.WithBatchSize(killBatch),
		idemnats.WithBusyDelay(100*time.Millisecond))
}

// runChild is the consumer process: it handles the stream's messages, and
// on the victim's message says so on stdout and hangs, until it is killed.
func runChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	stream, prefix, victim := os.Getenv(childEnv), os.Getenv(childPrefixEnv), os.Getenv(childVictimEnv)
	nc, err := nats.Connect(idemnatstest.URL())
	if err != nil {
		return fail(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	cons, err := js.Consumer(ctx, stream, "workers")
	if err != nil {
		return fail(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisstoretest.Addr()})
	store, err := redisstore.New(rdb, redisstore.Config{Prefix: prefix})
	if err != nil {
		return fail(err)
	}
	g, err := idem.New(store, idem.Config{Namespace: killNamespace, Lease: killLease})
	if err != nil {
		return fail(err)
	}
	count := killHandler(rdb, prefix)
	c, err := newKillConsumer(g, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if msg.Headers().Get(jetstream.MsgIDHeader) == victim {
			// The handler before this one has returned, but its outcome
			// may still be on its way to the store: a kill now would be
			// the window after a side effect and before its outcome,
			// which a redelivery rightly runs again. Wait until every
			// effect so far has its outcome, so that the kill tests the
			// victim and the messages behind it.
			if err := awaitOutcomes(ctx, rdb, g, prefix); err != nil {
				return err
			}
			fmt.Printf("holding %s\n", victim)
			select {} // killed here, mid-handler
		}
		return count(ctx, msg)
	})
	if err != nil {
		return fail(err)
	}
	return fail(c.Run(ctx))
}

// awaitOutcomes waits until every key with an effect has its outcome
// stored.
func awaitOutcomes(ctx context.Context, rdb *redis.Client, g *idem.Guard, prefix string) error {
	for deadline := time.Now().Add(time.Minute); ; {
		effected, err := rdb.Keys(ctx, prefix+"effects:*").Result()
		if err != nil {
			return err
		}
		pending := 0
		for _, k := range effected {
			r, err := g.Store().Get(ctx, g.StoreKey(strings.TrimPrefix(k, prefix+"effects:")))
			if err != nil || r.Status != storage.StatusCompleted {
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d effects without an outcome after a minute", pending)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A consumer process killed with SIGKILL in the middle of a handler: its
// message and the ones it had fetched come back once AckWait passes, the
// keys it held are taken over once its leases end, and every message has
// its effect exactly once, the victim's included.
func TestKilledConsumer(t *testing.T) {
	t.Parallel()
	_, js := idemnatstest.Connect(t, idemnatstest.URL())
	rdb := redisstoretest.Client(t)
	prefix := redisstoretest.Prefix(t, rdb)
	store, err := redisstore.New(rdb, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	s := idemnatstest.NewStream(t, js, jetstream.StreamConfig{})
	cons := idemnatstest.NewConsumer(t, s, jetstream.ConsumerConfig{AckWait: time.Second})

	const n = 30
	key := func(i int) string { return fmt.Sprintf("k-%02d", i) }
	victim := key(10)
	for i := range n {
		idemnatstest.Publish(t, js, idemnatstest.Subject(s, "jobs"), "job "+key(i), jetstream.MsgIDHeader, key(i))
	}

	// Generous: on a loaded machine the child's fetches and outcomes
	// before the kill can take tens of seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+s.CachedInfo().Config.Name, childPrefixEnv+"="+prefix, childVictimEnv+"="+victim)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "holding "+victim {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("the child said %q (%v), want it to hold %s", line, err, victim)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()

	count := func(k string) int {
		v, err := rdb.Get(context.Background(), prefix+"effects:"+k).Int()
		if err != nil && err != redis.Nil {
			t.Fatalf("effects of %s: %v", k, err)
		}
		return v
	}
	done := 0
	for i := range n {
		done += count(key(i))
	}
	if done == 0 || count(victim) != 0 {
		t.Fatalf("when killed, the child had %d effects, %d of them the victim's: want some, none of the victim's", done, count(victim))
	}

	g := idemnatstest.Guard(t, store, idem.Config{Namespace: killNamespace, Lease: killLease})
	victimDelivery := make(chan uint64, 1)
	handler := killHandler(rdb, prefix)
	c, err := newKillConsumer(g, cons, func(ctx context.Context, msg jetstream.Msg) error {
		if msg.Headers().Get(jetstream.MsgIDHeader) == victim {
			md, _ := msg.Metadata()
			select {
			case victimDelivery <- md.NumDelivered:
			default:
			}
		}
		return handler(ctx, msg)
	})
	if err != nil {
		t.Fatal(err)
	}
	idemnatstest.Start(t, c)
	idemnatstest.WaitFor(t, 30*time.Second, "every message handled and acked", func() bool {
		total := 0
		for i := range n {
			total += count(key(i))
		}
		return total >= n && idemnatstest.Drained(t, cons)
	})
	for i := range n {
		if c := count(key(i)); c != 1 {
			t.Errorf("%s: %d effects, want 1", key(i), c)
		}
	}
	if d := <-victimDelivery; d < 2 {
		t.Errorf("the victim's message was handled at delivery %d, want a redelivery", d)
	}
}
