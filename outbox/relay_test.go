package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// relayEnv is a test's outbox table, its pool and a Recorder as broker.
type relayEnv struct {
	pool  *pgxpool.Pool
	table string
	rec   *outboxtest.Recorder
}

func newRelayEnv(t *testing.T) *relayEnv {
	pool := pgstoretest.Pool(t, 10)
	return &relayEnv{pool: pool, table: outboxtest.Table(t, pool), rec: outboxtest.NewRecorder()}
}

// start runs a relay over the env's table and Recorder with cfg (Table
// set), observed by the events returned.
func (e *relayEnv) start(t *testing.T, cfg outbox.RelayConfig) (*outbox.Relay, *events, func()) {
	t.Helper()
	ev := newEvents()
	cfg.Observer = ev.observe
	r, err := outbox.NewRelay(e.pool, e.rec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, ev, outboxtest.RunRelay(t, r)
}

// enqueue writes n messages over keys keys (see outboxtest.Messages) with
// writers writers, and returns them with each key's order.
func (e *relayEnv) enqueue(t *testing.T, n, keys, writers int) ([]outbox.Message, map[string][]string) {
	t.Helper()
	msgs, want := outboxtest.Messages(n, keys, "d")
	outboxtest.Enqueue(t, e.pool, e.table, msgs, writers)
	return msgs, want
}

func (e *relayEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), strings.ReplaceAll(sql, "{table}", e.table), args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestRelayPublishesInOrderAndMarksSent(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	msgs, want := outboxtest.Messages(250, 10, "orders")
	outboxtest.Enqueue(t, e.pool, e.table, msgs, 4)
	e.start(t, relayConfig(e.table))
	e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
	if dups := outboxtest.CheckOrder(t, want, outboxtest.IDs(e.rec.Messages())); dups > 0 {
		t.Errorf("%d messages published twice without a failure", dups)
	}
	outboxtest.AwaitPending(t, e.pool, e.table, 0)
	if _, all := outboxtest.Pending(t, e.pool, e.table); all != len(msgs) {
		t.Errorf("%d rows after publishing, want the %d sent rows kept", all, len(msgs))
	}
	// The publisher got the messages as enqueued.
	got := e.rec.Messages()[0]
	if got.Destination != "orders" || got.Key == "" || len(got.Payload) == 0 || got.CreatedAt.IsZero() {
		t.Errorf("published %+v, want the enqueued fields and CreatedAt", got)
	}
}

func TestRelayDeleteSent(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	msgs, _ := e.enqueue(t, 30, 3, 2)
	cfg := relayConfig(e.table)
	cfg.DeleteSent = true
	e.start(t, cfg)
	e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
	outboxtest.AwaitPending(t, e.pool, e.table, 0)
	if _, all := outboxtest.Pending(t, e.pool, e.table); all != 0 {
		t.Errorf("%d rows left with DeleteSent, want 0", all)
	}
}

// TestRelayWakesOnNotify publishes with a poll interval (and every other
// interval) of an hour: only the NOTIFY of an Outbox with Config.Notify
// can wake the relay.
func TestRelayWakesOnNotify(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	cfg := relayConfig(e.table)
	cfg.PollInterval = time.Hour
	cfg.RebalanceInterval = time.Hour
	cfg.LagInterval = time.Hour
	cfg.CleanupInterval = time.Hour
	e.start(t, cfg)
	awaitIdle(t, e)
	ob, err := outbox.New(outbox.Config{Table: e.table, Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	msgs, _ := outboxtest.Messages(3, 1, "d")
	if err := ob.Enqueue(testCtx(t), e.pool, msgs...); err != nil {
		t.Fatal(err)
	}
	e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
}

// awaitIdle waits until the relay of e's table waits for notifications:
// its session is idle after a fetch.
func awaitIdle(t *testing.T, e *relayEnv) {
	t.Helper()
	schema, _, _ := strings.Cut(e.table, ".")
	deadline := time.Now().Add(outboxtest.Timeout)
	for {
		var n int
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE state = 'idle' AND starts_with(query, 'SELECT id, message_id') AND strpos(query, $1) > 0`, schema).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay never went idle")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRelayPollsWithoutNotify(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	ob, err := outbox.New(outbox.Config{Table: e.table})
	if err != nil {
		t.Fatal(err)
	}
	cfg := relayConfig(e.table)
	cfg.PollInterval = 20 * time.Millisecond
	e.start(t, cfg)
	awaitIdle(t, e)
	if err := ob.Enqueue(testCtx(t), e.pool, outbox.Message{ID: "polled", Destination: "d"}); err != nil {
		t.Fatal(err)
	}
	e.rec.AwaitIDs(t, outboxtest.Timeout, []string{"polled"})
}

// TestRelayBacksOffWhileTheBrokerIsDown: nothing is published while the
// broker is down, the relay waits longer and longer (up to MaxBackoff),
// no row is charged an attempt, even with MaxAttempts 1, and once the
// broker is back every message is published once, in order.
func TestRelayBacksOffWhileTheBrokerIsDown(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	e.rec.SetDown(true)
	msgs, want := e.enqueue(t, 300, 10, 4)
	cfg := relayConfig(e.table)
	cfg.MaxAttempts = 1
	r, ev, _ := e.start(t, cfg)
	var waits []time.Duration
	for len(waits) < 6 {
		got := ev.await(t, "backoff", func(e outbox.Event) bool { return e.Op == outbox.OpBackoff })
		if !errors.Is(got.Err, outboxtest.ErrDown) {
			t.Errorf("backoff after %v, want ErrDown", got.Err)
		}
		waits = append(waits, got.Duration)
	}
	for i, w := range waits {
		if w > cfg.MaxBackoff || w < cfg.MinBackoff/2 {
			t.Errorf("backoff %d is %v, want within [%v, %v]", i, w, cfg.MinBackoff/2, cfg.MaxBackoff)
		}
	}
	if waits[5] <= waits[0] {
		t.Errorf("backoffs %v do not grow", waits)
	}
	if n := len(e.rec.Messages()); n != 0 {
		t.Fatalf("%d messages recorded while down", n)
	}
	var charged int
	err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+quoteTable(e.table)+" WHERE attempts > 0 OR next_attempt_at IS NOT NULL").Scan(&charged)
	if err != nil {
		t.Fatal(err)
	}
	if charged != 0 {
		t.Errorf("%d rows charged an attempt while the broker was down, want none", charged)
	}
	if lag, err := r.Lag(testCtx(t)); err != nil || lag.Dead != 0 || lag.Pending != int64(len(msgs)) {
		t.Errorf("Lag() = %+v, %v; want every message pending, none dead", lag, err)
	}

	e.rec.SetDown(false)
	e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
	if dups := outboxtest.CheckOrder(t, want, outboxtest.IDs(e.rec.Messages())); dups > 0 {
		t.Errorf("%d duplicates, though no failed message had reached the broker", dups)
	}
	outboxtest.AwaitPending(t, e.pool, e.table, 0)
}

func quoteTable(table string) string {
	s, t, _ := strings.Cut(table, ".")
	return `"` + s + `"."` + t + `"`
}

// TestRelayKeepsOrderThroughFlakyPublishes: messages fail at random, one by
// one and whole batches at a time, while writers enqueue; each key's
// messages still reach the broker in order, and all of them.
func TestRelayKeepsOrderThroughFlakyPublishes(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	e.rec.FailWith(func(m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if rng.IntN(10) == 0 {
			return fmt.Errorf("refused %s", m.ID)
		}
		return nil
	})
	cfg := relayConfig(e.table)
	cfg.BatchSize = 25
	e.start(t, cfg)
	msgs, want := outboxtest.Messages(600, 12, "d")
	stopFlapping := make(chan struct{})
	flapped := make(chan struct{})
	go func() {
		defer close(flapped)
		for down := true; ; down = !down {
			e.rec.SetDown(down)
			select {
			case <-stopFlapping:
				e.rec.SetDown(false)
				return
			case <-time.After(15 * time.Millisecond):
			}
		}
	}()
	outboxtest.Enqueue(t, e.pool, e.table, msgs, 6)
	close(stopFlapping)
	<-flapped
	e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
	if dups := outboxtest.CheckOrder(t, want, outboxtest.IDs(e.rec.Messages())); dups > 0 {
		t.Errorf("%d duplicates, though failed messages never reached the broker", dups)
	}
}

// partitionsOf waits for an OpRebalance event of ev after which the relay
// holds n partitions, and returns them.
func partitionsOf(t *testing.T, ev *events, n int) []int {
	t.Helper()
	return ev.await(t, fmt.Sprintf("rebalance to %d partitions", n), func(e outbox.Event) bool {
		return e.Op == outbox.OpRebalance && len(e.Partitions) == n
	}).Partitions
}

// TestRelaysShareThePartitions: relays joining and leaving a table split
// its partitions evenly and never hold one twice.
func TestRelaysShareThePartitions(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	cfg := relayConfig(e.table)
	_, ev1, stop1 := e.start(t, cfg)
	partitionsOf(t, ev1, 16)
	_, ev2, _ := e.start(t, cfg)
	p1, p2 := partitionsOf(t, ev1, 8), partitionsOf(t, ev2, 8)
	if all := slices.Sorted(slices.Values(append(slices.Clone(p1), p2...))); !slices.Equal(all, seq(16)) {
		t.Errorf("two relays hold %v and %v, want every partition once", p1, p2)
	}
	_, ev3, _ := e.start(t, cfg)
	partitionsOf(t, ev3, 4) // ceil(16/3) = 6 for the first two, the rest for it
	stop1()
	p2, p3 := partitionsOf(t, ev2, 8), partitionsOf(t, ev3, 8)
	if all := slices.Sorted(slices.Values(append(slices.Clone(p2), p3...))); !slices.Equal(all, seq(16)) {
		t.Errorf("after one left, the relays hold %v and %v, want every partition once", p2, p3)
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestRelaysWithDifferentPartitionCountsDoNotOverlap: the relay with more
// partitions holds none while one with fewer runs.
func TestRelaysWithDifferentPartitionCountsDoNotOverlap(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	few := relayConfig(e.table)
	few.Partitions = 4
	_, evFew, stopFew := e.start(t, few)
	partitionsOf(t, evFew, 4)
	_, evMany, _ := e.start(t, relayConfig(e.table))
	ev := evMany.await(t, "rebalance", func(e outbox.Event) bool { return e.Op == outbox.OpRebalance })
	if len(ev.Partitions) != 0 {
		t.Errorf("the relay with 16 partitions holds %v beside one with 4, want none", ev.Partitions)
	}
	stopFew()
	partitionsOf(t, evMany, 16)
}

// TestTwoRelaysKeepEachKeysOrder: two relays share a table and a broker;
// writers enqueue 1,000 messages over 20 keys while the broker fails now
// and then and one relay is stopped and started again. Every message
// arrives, each key's in order.
func TestTwoRelaysKeepEachKeysOrder(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	cfg := relayConfig(e.table)
	cfg.BatchSize = 20
	_, ev1, stop1 := e.start(t, cfg)
	_, ev2, _ := e.start(t, cfg)
	partitionsOf(t, ev1, 8)
	partitionsOf(t, ev2, 8)
	var failing sync.Mutex
	n := 0
	e.rec.FailWith(func(outbox.Message) error {
		failing.Lock()
		defer failing.Unlock()
		if n++; n%37 == 0 {
			return errors.New("refused")
		}
		return nil
	})
	msgs, want := outboxtest.Messages(1000, 20, "d")
	done := make(chan struct{})
	go func() {
		defer close(done)
		outboxtest.Enqueue(t, e.pool, e.table, msgs, 8)
	}()
	e.rec.Await(t, outboxtest.Timeout, func(m []outbox.Message) bool { return len(m) >= 300 })
	stop1() // its partitions go to the other relay
	e.rec.Await(t, outboxtest.Timeout, func(m []outbox.Message) bool { return len(m) >= 600 })
	e.start(t, cfg) // and some come back
	<-done
	e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
	dups := outboxtest.CheckOrder(t, want, outboxtest.IDs(e.rec.Messages()))
	t.Logf("%d duplicates", dups)
	outboxtest.AwaitPending(t, e.pool, e.table, 0)
}

// TestRelayReconnectsAfterItsSessionIsKilled: the server ends the relay's
// session; the relay reports it, reconnects, takes its partitions back and
// publishes what comes next.
func TestRelayReconnectsAfterItsSessionIsKilled(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	_, ev, _ := e.start(t, relayConfig(e.table))
	partitionsOf(t, ev, 16)
	e.exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", "outbox relay "+e.table)
	got := ev.await(t, "disconnect", func(e outbox.Event) bool { return e.Op == outbox.OpDisconnect })
	if !errors.Is(got.Err, outbox.ErrUnavailable) {
		t.Errorf("disconnect error %v, want ErrUnavailable", got.Err)
	}
	partitionsOf(t, ev, 16)
	msgs, _ := e.enqueue(t, 10, 2, 1)
	e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
}

// TestRelayDeletesSentRowsAfterTheRetention: rows sent longer ago than the
// retention are deleted; newer sent rows and pending rows stay.
func TestRelayDeletesSentRowsAfterTheRetention(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	msgs, _ := e.enqueue(t, 10, 1, 1)
	cfg := relayConfig(e.table)
	cfg.Retention = time.Hour
	cfg.CleanupInterval = 10 * time.Millisecond
	_, ev, _ := e.start(t, cfg)
	e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
	outboxtest.AwaitPending(t, e.pool, e.table, 0)
	e.rec.SetDown(true)
	outboxtest.Enqueue(t, e.pool, e.table, []outbox.Message{{ID: "pending", Destination: "d"}}, 1)
	e.exec(t, "UPDATE {table} SET sent_at = now() - interval '2 hours' WHERE id IN (SELECT id FROM {table} WHERE sent_at IS NOT NULL ORDER BY id LIMIT 4)")
	got := ev.await(t, "cleanup", func(e outbox.Event) bool { return e.Op == outbox.OpCleanup })
	if got.Deleted != 4 || got.Err != nil {
		t.Errorf("cleanup deleted %d (%v), want the 4 rows past the retention", got.Deleted, got.Err)
	}
	if pending, all := outboxtest.Pending(t, e.pool, e.table); pending != 1 || all != 7 {
		t.Errorf("%d pending of %d rows, want 1 of 7 (cleanup event %+v)", pending, all, got)
	}
}

func TestRelayReportsLag(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	e.rec.SetDown(true)
	e.enqueue(t, 5, 1, 1)
	e.exec(t, "UPDATE {table} SET created_at = now() - interval '90 seconds' WHERE id = (SELECT min(id) FROM {table})")
	cfg := relayConfig(e.table)
	cfg.LagInterval = 10 * time.Millisecond
	r, ev, _ := e.start(t, cfg)
	lag, err := r.Lag(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if lag.Pending != 5 || lag.OldestPending < 90*time.Second || lag.OldestPending > time.Hour {
		t.Errorf("Lag() = %+v, want 5 pending, the oldest about 90s old", lag)
	}
	got := ev.await(t, "lag", func(e outbox.Event) bool { return e.Op == outbox.OpLag })
	if got.Pending != 5 || got.OldestPending < 90*time.Second {
		t.Errorf("OpLag %+v, want 5 pending, the oldest at least 90s old", got)
	}
	e.rec.SetDown(false)
	ev.await(t, "lag of 0", func(e outbox.Event) bool { return e.Op == outbox.OpLag && e.Pending == 0 && e.OldestPending == 0 })
}

// TestRelayHoldsBackAKeyBehindAnUndecodableRow: a row whose headers were
// damaged by hand fails without being published, and so do the later rows
// of its key; other keys go on. Once repaired, the key's rows go out in
// order.
func TestRelayHoldsBackAKeyBehindAnUndecodableRow(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	msgs, want := outboxtest.Messages(12, 3, "d") // key-0: messages 0, 3, 6, 9
	outboxtest.Enqueue(t, e.pool, e.table, msgs, 1)
	e.exec(t, "UPDATE {table} SET headers = '\\x09'::bytea WHERE message_id = $1", msgs[3].ID)
	cfg := relayConfig(e.table)
	cfg.MaxAttempts = 1000000 // the row is repaired, not dead
	_, ev, _ := e.start(t, cfg)
	e.rec.Await(t, outboxtest.Timeout, func(m []outbox.Message) bool { return len(m) == 9 })
	got := ev.await(t, "failed publish", func(e outbox.Event) bool { return e.Op == outbox.OpPublish && e.Failed > 0 })
	if !errors.Is(got.Err, outbox.ErrCorruptHeaders) {
		t.Errorf("publish failure %v, want ErrCorruptHeaders", got.Err)
	}
	for _, m := range e.rec.Messages() {
		if m.ID == msgs[6].ID || m.ID == msgs[9].ID {
			t.Errorf("%s, behind an undecodable row of its key, was published", m.ID)
		}
	}
	e.exec(t, "UPDATE {table} SET headers = NULL WHERE message_id = $1", msgs[3].ID)
	e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
	outboxtest.CheckOrder(t, want, outboxtest.IDs(e.rec.Messages()))
}

func TestRelayRunAndClose(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	r, err := outbox.NewRelay(e.pool, e.rec, relayConfig(e.table))
	if err != nil {
		t.Fatal(err)
	}
	// Close while Run is blocked in Publish: Run returns, nil.
	entered := make(chan struct{}, 1)
	e.rec.Before(func(ctx context.Context, _ []outbox.Message) {
		entered <- struct{}{}
		<-ctx.Done()
	})
	outboxtest.Enqueue(t, e.pool, e.table, []outbox.Message{{Destination: "d"}}, 1)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	<-entered
	if err := r.Run(context.Background()); !errors.Is(err, outbox.ErrRunning) {
		t.Errorf("a second Run = %v, want ErrRunning", err)
	}
	r.Close()
	if err := <-done; err != nil {
		t.Errorf("Run = %v after Close, want nil", err)
	}
	r.Close() // idempotent
	if err := r.Run(context.Background()); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Run after Close = %v, want ErrClosed", err)
	}
}

// TestRelayMarksWhatItPublishedWhenStopped: a relay stopped right after a
// publish marks the batch before it returns.
func TestRelayMarksWhatItPublishedWhenStopped(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	e.enqueue(t, 5, 1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	// Run's context ends once the broker took the batch.
	pub := publisherFunc(func(pctx context.Context, msgs []outbox.Message) error {
		defer cancel()
		return e.rec.Publish(pctx, msgs)
	})
	r, err := outbox.NewRelay(e.pool, pub, relayConfig(e.table))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(e.rec.Messages()); n != 5 {
		t.Fatalf("%d published, want 5", n)
	}
	if pending, _ := outboxtest.Pending(t, e.pool, e.table); pending != 0 {
		t.Errorf("%d rows still pending after Run returned, want the published ones marked", pending)
	}
}

type publisherFunc func(ctx context.Context, msgs []outbox.Message) error

func (f publisherFunc) Publish(ctx context.Context, msgs []outbox.Message) error { return f(ctx, msgs) }

func TestRelayStopsOnAMissingTable(t *testing.T) {
	t.Parallel()
	pool := pgstoretest.Pool(t, 2)
	r, err := outbox.NewRelay(pool, outboxtest.NewRecorder(), relayConfig(pgstoretest.Schema(t, pool)+".nothing"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.Run(testCtx(t))
	if err == nil || !strings.Contains(err.Error(), "outbox.Migrate") {
		t.Errorf("Run on a missing table = %v, want an error naming outbox.Migrate", err)
	}
}

func TestNewRelayRefusesBadConfig(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), pgstoretest.URL()) // connects lazily
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rec := outboxtest.NewRecorder()
	for _, tc := range []struct {
		cfg   outbox.RelayConfig
		field string
	}{
		{outbox.RelayConfig{Partitions: -1}, "Partitions"},
		{outbox.RelayConfig{Partitions: outbox.MaxPartitions + 1}, "Partitions"},
		{outbox.RelayConfig{BatchSize: 10001}, "BatchSize"},
		{outbox.RelayConfig{MaxBatchBytes: -1}, "MaxBatchBytes"},
		{outbox.RelayConfig{MaxAttempts: -1}, "MaxAttempts"},
		{outbox.RelayConfig{Retention: time.Millisecond}, "Retention"},
		{outbox.RelayConfig{PollInterval: -time.Second}, "PollInterval"},
		{outbox.RelayConfig{MinBackoff: time.Second, MaxBackoff: time.Millisecond}, "MaxBackoff"},
		{outbox.RelayConfig{Table: "Bad"}, "Table"},
	} {
		if _, err := outbox.NewRelay(pool, rec, tc.cfg); err == nil || !strings.HasPrefix(err.Error(), "outbox: RelayConfig."+tc.field) {
			t.Errorf("NewRelay(%+v) = %v, want an error naming RelayConfig.%s", tc.cfg, err, tc.field)
		}
	}
	if _, err := outbox.NewRelay(nil, rec, outbox.RelayConfig{}); err == nil {
		t.Error("NewRelay(nil pool) = nil error")
	}
	if _, err := outbox.NewRelay(pool, nil, outbox.RelayConfig{}); err == nil {
		t.Error("NewRelay(nil Publisher) = nil error")
	}
}
