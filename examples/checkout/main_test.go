package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// A child process runs one part of the checkout with a crash built in: the
// test binary again, told by these variables what to run and where.
const (
	childEnv  = "CHECKOUT_TEST_CHILD"  // "relay", "consumer" or "consumer-charged"
	configEnv = "CHECKOUT_TEST_CONFIG" // childConfig as JSON
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(child(role))
	}
	goleak.VerifyTestMain(m)
}

// childConfig is config, as a child gets it.
type childConfig struct {
	Postgres, NATS, Schema, Stream, Subject string
	AckWait, Dedup                          time.Duration
}

func (c childConfig) config() config {
	return config{postgres: c.Postgres, nats: c.NATS, schema: c.Schema, stream: c.Stream, subject: c.Subject, ackWait: c.AckWait, dedup: c.Dedup}
}

// child runs role until it is killed: a relay that, once the stream took a
// batch, says "published" and stops before marking it; a consumer that,
// with its first charge written and not committed, says "charging" and
// stops; or one ("consumer-charged") that, once its first charge and the
// charge's record committed, says "charged" and stops before the
// delivery's outcome is stored.
func child(role string) int {
	var cc childConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cc); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	stall := func(line string) {
		fmt.Println(line)
		select {} // SIGKILL comes here
	}
	var h hooks
	switch role {
	case "relay":
		h.publisher = func(p outbox.Publisher) outbox.Publisher {
			return publisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
				if err := p.Publish(ctx, msgs); err != nil {
					return err
				}
				stall(fmt.Sprint("published ", len(msgs)))
				return nil
			})
		}
	case "consumer":
		h.charging = func(id string) { stall("charging " + id) }
	case "consumer-charged":
		h.charged = func(id string) { stall("charged " + id) }
		role = "consumer"
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := run(context.Background(), cc.config(), role, "", log, h); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return 2
}

type publisherFunc func(ctx context.Context, msgs []outbox.Message) error

func (f publisherFunc) Publish(ctx context.Context, msgs []outbox.Message) error { return f(ctx, msgs) }

// killChildAt starts a child running role over cc, waits until it says a
// line starting with want, kills it with SIGKILL and returns the line.
func killChildAt(t *testing.T, role string, cc childConfig, want string) string {
	t.Helper()
	env, err := json.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role, configEnv+"="+string(env))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), want) {
				lines <- s.Text()
				break
			}
		}
		io.Copy(io.Discard, out)
		close(lines)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(60 * time.Second):
	}
	cmd.Process.Signal(syscall.SIGKILL)
	err = cmd.Wait()
	if line == "" {
		t.Fatalf("the %s child never said %q (%v)", role, want, err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the %s child ended with %v, want killed by SIGKILL", role, err)
	}
	return line
}

var natsServer = testenv.Server{Name: "NATS", Env: "IDEM_NATS_URL", Default: "nats://127.0.0.1:4222"}

// TestExactlyOneChargePerOrder runs the checkout with a duplicate at every
// hop and checks, with a reconciliation query, that every order was
// charged exactly once:
//
//   - clients send every POST /orders twice at once and a third time after;
//   - a relay process is killed after the stream took a batch and before
//     it marked the rows sent, so the next relay publishes them again;
//   - a consumer process is killed with a charge written and not
//     committed, so NATS delivers that message again;
//   - another is killed with a charge committed and the delivery's
//     outcome not stored, so the message is handled again once its lease
//     ends;
//   - the surviving consumer drops the ack of every third message once, so
//     NATS delivers those again too.
func TestExactlyOneChargePerOrder(t *testing.T) {
	pool := pgstoretest.Pool(t, 4)
	run := strings.ToLower(outbox.NewID()[:8])
	cc := childConfig{
		Postgres: pgstoretest.URL(),
		NATS:     natsServer.Addr(),
		Schema:   pgstoretest.Schema(t, pool),
		Stream:   "checkouttest_" + run,
		Subject:  "checkouttest." + run + ".charges",
		AckWait:  time.Second,
		// The shortest duplicate window JetStream allows (see below).
		Dedup: 100 * time.Millisecond,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := open(ctx, cc.config(), log)
	if err != nil {
		if strings.HasPrefix(err.Error(), "nats:") {
			natsServer.Unreachable(t, cc.NATS, err)
		}
		t.Fatal(err)
	}
	defer c.close()
	defer c.js.DeleteStream(context.Background(), cc.Stream)

	// Clients, retrying.
	h, closeAPI, err := c.api()
	if err != nil {
		t.Fatal(err)
	}
	defer closeAPI()
	srv := httptest.NewServer(h)
	defer srv.Close()
	const orders = 40
	bodies := make([]string, orders)
	var clients sync.WaitGroup
	for i := range orders {
		clients.Go(func() {
			acct, key := fmt.Sprintf("acct-%d", i%6), fmt.Sprintf("order-%d", i)
			body := fmt.Sprintf(`{"customer":"customer %d","amount_cents":%d}`, i, 100+i)
			var first sync.WaitGroup
			got := make([]string, 3)
			for j := range 2 {
				first.Go(func() { got[j] = post(t, srv.URL, acct, key, body) })
			}
			first.Wait()
			got[2] = post(t, srv.URL, acct, key, body)
			if got[0] != got[1] || got[0] != got[2] {
				t.Errorf("order %d: the retries were answered %q, %q and %q; want one order", i, got[0], got[1], got[2])
			}
			bodies[i] = got[0]
		})
	}
	clients.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+c.table("orders")).Scan(&n); err != nil || n != orders {
		t.Fatalf("%d orders (%v), want %d: one per key", n, err, orders)
	}

	// A relay dies between publish and mark.
	line := killChildAt(t, "relay", cc, "published")
	var pending int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+c.table("outbox")+" WHERE sent_at IS NULL").Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != orders {
		t.Fatalf("the killed relay (%s) left %d of %d rows pending, want all: it marked nothing", line, pending, orders)
	}

	// The next relay publishes everything, the published batch again. It
	// starts once the stream's duplicate window is long past, as a relay
	// restarted after minutes would, so that the stream keeps the second
	// copies and the consumer's guard, not the broker, must drop them.
	time.Sleep(10 * cc.Dedup)
	var wg sync.WaitGroup
	parts, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() {
		if err := c.relay(parts, hooks{}); err != nil {
			t.Errorf("relay: %v", err)
		}
	})

	// A consumer dies mid-charge, and another between its charge and the
	// outcome of the delivery.
	charging := strings.TrimPrefix(killChildAt(t, "consumer", cc, "charging"), "charging ")
	charged := strings.TrimPrefix(killChildAt(t, "consumer-charged", cc, "charged"), "charged ")

	// The last consumer loses the first ack of every third message.
	var deliveries sync.Map // message ID → *atomic.Int32
	var total atomic.Int32
	wg.Go(func() {
		err := c.consume(parts, hooks{dropAck: func(id string) bool {
			v, _ := deliveries.LoadOrStore(id, new(atomic.Int32))
			k := v.(*atomic.Int32).Add(1)
			return total.Add(1)%3 == 0 && k == 1
		}})
		if err != nil {
			t.Errorf("consume: %v", err)
		}
	})

	// Every order charged, every message acked.
	cons, err := c.js.Consumer(ctx, cc.Stream, "charger")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var charged int
		if err := pool.QueryRow(ctx, "SELECT count(DISTINCT order_id) FROM "+c.table("charges")).Scan(&charged); err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if charged == orders && info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes %d of %d orders charged; consumer: %d pending, %d unacked", charged, orders, info.NumPending, info.NumAckPending)
		}
	}
	stop()
	wg.Wait()

	// Reconciliation: each order charged exactly once, for its amount and
	// account, and no charge without an order.
	rows, err := pool.Query(ctx, `SELECT o.id, count(c.id), count(c.id) FILTER (WHERE c.amount_cents = o.amount_cents AND c.account = o.account)
		FROM `+c.table("orders")+` o LEFT JOIN `+c.table("charges")+` c ON c.order_id = o.id
		GROUP BY o.id HAVING count(c.id) <> 1 OR count(c.id) FILTER (WHERE c.amount_cents = o.amount_cents AND c.account = o.account) <> 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, charges, right int64
		if err := rows.Scan(&id, &charges, &right); err != nil {
			t.Fatal(err)
		}
		t.Errorf("order %d: %d charges, %d of them for its account and amount; want exactly 1", id, charges, right)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var orphans int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+c.table("charges")+" c WHERE NOT EXISTS (SELECT 1 FROM "+c.table("orders")+" o WHERE o.id = c.order_id)").Scan(&orphans); err != nil || orphans != 0 {
		t.Errorf("%d charges without an order (%v), want 0", orphans, err)
	}

	// The duplicates did happen.
	s, err := c.js.Stream(ctx, cc.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := deliveries.Load(charging); d == nil {
		t.Errorf("the message %s, whose consumer was killed mid-charge, never came to the last consumer", charging)
	}
	if d, _ := deliveries.Load(charged); d == nil {
		t.Errorf("the message %s, whose consumer was killed after the charge, never came to the last consumer", charged)
	}
	if s.CachedInfo().State.Msgs <= orders {
		t.Errorf("the stream holds %d messages for %d orders; want the relay's second publish in it too", s.CachedInfo().State.Msgs, orders)
	}
	if int(total.Load()) <= orders {
		t.Errorf("the last consumer got %d deliveries of %d messages; the dropped acks should have brought more", total.Load(), orders)
	}
	t.Logf("%d orders; the killed relay %s; the stream holds %d messages; the last consumer got %d deliveries",
		orders, line, s.CachedInfo().State.Msgs, total.Load())
}

// post sends POST /orders as acct with the Idempotency-Key key and returns
// the status and body, failing t on a transport error.
func post(t *testing.T, base, acct, key, body string) string {
	req, err := http.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return ""
	}
	req.Header.Set("Authorization", "Bearer "+acct)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
}
