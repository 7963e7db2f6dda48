package outboxamqp_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/memstore"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/amqppub"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// The child process of TestRelayKilledBetweenPublishAndMark: a relay over
// the table and queue in the environment whose publisher, once RabbitMQ
// confirmed a batch, says so on stdout and then waits to be killed, before
// the relay can mark the batch sent.
const (
	childEnv      = "AMQPPUB_KILL_CHILD" // the outbox table
	publishedLine = "published"
)

func relayChild() int {
	pool, err := pgxpool.New(context.Background(), pgstoretest.URL())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	pub, err := amqppub.New(amqpURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	stall := publisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		if err := pub.Publish(ctx, msgs); err != nil {
			return err
		}
		fmt.Println(publishedLine, len(msgs))
		select {} // SIGKILL comes here: published, not marked
	})
	relay, err := outbox.NewRelay(pool, stall, outbox.RelayConfig{Table: os.Getenv(childEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := relay.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return 2
}

type publisherFunc func(ctx context.Context, msgs []outbox.Message) error

func (f publisherFunc) Publish(ctx context.Context, msgs []outbox.Message) error { return f(ctx, msgs) }

// TestRelayKilledBetweenPublishAndMark: a relay process is killed with
// SIGKILL after RabbitMQ confirmed its batch and before it marked the rows
// sent. The rows stay pending; the next relay publishes them again, with
// the same message IDs, so the queue delivers every charge twice; the
// consumer, guarded by idem with the message ID as its key, charges each
// order once.
func TestRelayKilledBetweenPublishAndMark(t *testing.T) {
	conn := dial(t)
	q := declareQueue(t, conn)
	pool := pgstoretest.Pool(t, 4)
	table := outboxtest.Table(t, pool)
	charges, _ := outboxtest.Messages(5, 5, q)
	outboxtest.Enqueue(t, pool, table, charges, 1)

	// The consumer: idem-guarded, acknowledging after the outcome.
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	guard, err := idem.New(store, idem.Config{Namespace: "charges"})
	if err != nil {
		t.Fatal(err)
	}
	defer guard.Close()
	var (
		mu         sync.Mutex
		deliveries = map[string]int{} // per message ID
		charged    = map[string]int{}
	)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var consumer sync.WaitGroup
	consumer.Go(func() {
		for d := range msgs {
			_, err := guard.Do(context.Background(), d.MessageId, d.Body, func(context.Context) ([]byte, error) {
				mu.Lock()
				defer mu.Unlock()
				charged[d.MessageId]++ // the charge
				return []byte("receipt"), nil
			})
			mu.Lock()
			deliveries[d.MessageId]++
			mu.Unlock()
			if err != nil {
				d.Nack(false, true)
				continue
			}
			d.Ack(false)
		}
	})
	defer func() { ch.Close(); consumer.Wait() }()

	// The relay that dies.
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+table)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), publishedLine) {
				line <- s.Text()
				return
			}
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		if !ok || l != fmt.Sprint(publishedLine, " ", len(charges)) {
			child.Process.Kill()
			child.Wait()
			t.Fatalf("the child relay said %q, want %q", l, fmt.Sprint(publishedLine, " ", len(charges)))
		}
	case <-time.After(outboxtest.Timeout):
		child.Process.Kill()
		child.Wait()
		t.Fatal("the child relay did not publish")
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child: %v, want killed", err)
	}
	if pending, _ := outboxtest.Pending(t, pool, table); pending != len(charges) {
		t.Fatalf("%d rows pending after the kill, want all %d: published but not marked", pending, len(charges))
	}

	// The next relay.
	relay, err := outbox.NewRelay(pool, newPublisher(t, amqpURL), outbox.RelayConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RunRelay(t, relay)
	outboxtest.AwaitPending(t, pool, table, 0)
	deadline := time.Now().Add(outboxtest.Timeout)
	for {
		mu.Lock()
		n := 0
		for _, c := range charges {
			if deliveries[c.ID] >= 2 {
				n++
			}
		}
		mu.Unlock()
		if n == len(charges) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages delivered twice within %v", n, len(charges), outboxtest.Timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range charges {
		if charged[c.ID] != 1 {
			t.Errorf("%s: delivered %d times, charged %d times; want once", c.ID, deliveries[c.ID], charged[c.ID])
		}
	}
}
