package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

// awaitDead waits until table has n dead rows, and returns them.
func awaitDead(t *testing.T, e *relayEnv, n int) []outbox.DeadMessage {
	t.Helper()
	deadline := time.Now().Add(outboxtest.Timeout)
	for {
		dead, err := outbox.Dead(testCtx(t), e.pool, e.table, 10000)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) == n {
			return dead
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dead rows after %v, want %d", len(dead), outboxtest.Timeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failIDs makes e's Recorder refuse the messages whose ID starts with
// prefix, with err.
func failIDs(e *relayEnv, prefix string, err error) {
	e.rec.FailWith(func(m outbox.Message) error {
		if strings.HasPrefix(m.ID, prefix) {
			return fmt.Errorf("%w (%s)", err, m.ID)
		}
		return nil
	})
}

// TestRelayPublishesPastRowsTheBrokerRefuses is the head-of-line blocking
// of issue 27: one partition, batches of 5, five rows the broker always
// refuses, then three good rows of other keys. The good rows are published
// while the refused ones wait out their backoff, and the refused ones die
// after MaxAttempts attempts, their last error kept.
func TestRelayPublishesPastRowsTheBrokerRefuses(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	failIDs(e, "poison-", errors.New("refused"))
	var msgs []outbox.Message
	for i := range 5 {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprintf("poison-%d", i), Destination: "d", Key: fmt.Sprintf("bad-%d", i)})
	}
	good := []string{"good-0", "good-1", "good-2"}
	for i, id := range good {
		msgs = append(msgs, outbox.Message{ID: id, Destination: "d", Key: fmt.Sprintf("ok-%d", i)})
	}
	outboxtest.Enqueue(t, e.pool, e.table, msgs, 1)
	cfg := relayConfig(e.table)
	cfg.Partitions, cfg.BatchSize, cfg.MaxAttempts = 1, 5, 3
	r, ev, _ := e.start(t, cfg)
	e.rec.AwaitIDs(t, outboxtest.Timeout, good)

	dead := awaitDead(t, e, 5)
	for i, d := range dead {
		if d.Message.ID != msgs[i].ID || d.Message.Key != msgs[i].Key || d.Attempts != 3 || !strings.Contains(d.LastError, "refused") {
			t.Errorf("dead row %d: %+v, want %s after 3 attempts, its error kept", i, d, msgs[i].ID)
		}
	}
	got := 0
	for got < 5 {
		got += ev.await(t, "dead", func(e outbox.Event) bool { return e.Op == outbox.OpDead }).Dead
	}
	if got != 5 {
		t.Errorf("OpDead events count %d dead rows, want 5", got)
	}
	outboxtest.AwaitPending(t, e.pool, e.table, 0)
	lag, err := r.Lag(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if lag.Pending != 0 || lag.Dead != 5 {
		t.Errorf("Lag() = %+v, want 0 pending and 5 dead", lag)
	}
	if read, err := outbox.ReadLag(testCtx(t), e.pool, e.table); err != nil || read != lag {
		t.Errorf("ReadLag() = %+v, %v; want the relay's Lag %+v", read, err, lag)
	}
	if n := len(e.rec.Messages()); n != 3 {
		t.Errorf("%d messages published, want the 3 good ones", n)
	}
}

// TestRelayDeadLettersAPermanentFailureAtOnce: a message the Publisher
// refuses for good dies at its first attempt, and the later messages of
// its key follow it, in order.
func TestRelayDeadLettersAPermanentFailureAtOnce(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	failIDs(e, "too-large", outbox.Permanent(errors.New("message too large")))
	msgs := []outbox.Message{
		{ID: "k-0", Destination: "d", Key: "k"},
		{ID: "too-large", Destination: "d", Key: "k"},
		{ID: "k-2", Destination: "d", Key: "k"},
		{ID: "k-3", Destination: "d", Key: "k"},
	}
	outboxtest.Enqueue(t, e.pool, e.table, msgs, 1)
	e.start(t, relayConfig(e.table))
	e.rec.AwaitIDs(t, outboxtest.Timeout, []string{"k-0", "k-2", "k-3"})
	outboxtest.CheckOrder(t, map[string][]string{"k": {"k-0", "k-2", "k-3"}}, outboxtest.IDs(e.rec.Messages()))
	dead := awaitDead(t, e, 1)
	if d := dead[0]; d.Message.ID != "too-large" || d.Attempts != 1 || !strings.Contains(d.LastError, "permanent: message too large") {
		t.Errorf("dead row %+v, want too-large after 1 attempt, with its error", d)
	}
}

// TestRelayKeepsKeyOrderAmongPoisonRowsAt16Partitions: many keys over 16
// partitions, with rows that always fail, rows that fail for good and rows
// that fail twice before they pass, while writers enqueue. Every row that
// can be published is, each key's in order (a row retried holds its key's
// later rows back); the others are dead.
func TestRelayKeepsKeyOrderAmongPoisonRowsAt16Partitions(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	msgs, want := outboxtest.Messages(800, 40, "d")
	var poison, flaky int
	for i := range msgs {
		switch i % 23 {
		case 5:
			msgs[i].ID = "poison-" + msgs[i].ID
			poison++
		case 11:
			msgs[i].ID = "permanent-" + msgs[i].ID
			poison++
		case 17:
			msgs[i].ID = "flaky-" + msgs[i].ID
			flaky++
		}
	}
	want = map[string][]string{}
	var publishable []string
	for _, m := range msgs {
		if !strings.HasPrefix(m.ID, "poison-") && !strings.HasPrefix(m.ID, "permanent-") {
			want[m.Key] = append(want[m.Key], m.ID)
			publishable = append(publishable, m.ID)
		}
	}
	var mu sync.Mutex
	tries := map[string]int{}
	e.rec.FailWith(func(m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		tries[m.ID]++
		switch {
		case strings.HasPrefix(m.ID, "poison-"):
			return errors.New("refused")
		case strings.HasPrefix(m.ID, "permanent-"):
			return outbox.Permanent(errors.New("no such destination"))
		case strings.HasPrefix(m.ID, "flaky-") && tries[m.ID] <= 2:
			return errors.New("not yet")
		}
		return nil
	})
	cfg := relayConfig(e.table)
	cfg.BatchSize, cfg.MaxAttempts = 20, 4
	_, ev, _ := e.start(t, cfg)
	partitionsOf(t, ev, 16)
	outboxtest.Enqueue(t, e.pool, e.table, msgs, 6)
	e.rec.AwaitIDs(t, outboxtest.Timeout, publishable)
	if dups := outboxtest.CheckOrder(t, want, outboxtest.IDs(e.rec.Messages())); dups > 0 {
		t.Errorf("%d duplicates, though no failed message reached the broker", dups)
	}
	dead := awaitDead(t, e, poison)
	for _, d := range dead {
		if strings.HasPrefix(d.Message.ID, "permanent-") && d.Attempts != 1 || strings.HasPrefix(d.Message.ID, "poison-") && d.Attempts != 4 {
			t.Errorf("dead row %s after %d attempts, want 1 for a permanent failure, 4 (MaxAttempts) for others", d.Message.ID, d.Attempts)
		}
	}
	outboxtest.AwaitPending(t, e.pool, e.table, 0)
	t.Logf("%d published, %d dead, %d flaky", len(publishable), poison, flaky)
}

// TestDeadBoundsItsPayloadsInBytes: Dead returns the oldest dead rows
// whose payloads fit in MaxDeadBytes, not all of limit: six dead rows of a
// quarter of it each come four at a time.
func TestDeadBoundsItsPayloadsInBytes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool := pgstoretest.Pool(t, 2)
	table := outboxtest.Table(t, pool)
	schema, name, _ := strings.Cut(table, ".")
	_, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, name + "_dead"}.Sanitize()+
		` (id, message_id, destination, key, key_hash, payload, created_at, attempts, last_error)
		SELECT i, 'm-' || i, 'd', ''::bytea, 0, convert_to(repeat('x', $1), 'UTF8'), now(), 1, 'refused'
		FROM generate_series(1, 6) AS i`, outbox.MaxDeadBytes/4)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := outbox.Dead(ctx, pool, table, 10)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, d := range dead {
		size += len(d.Message.Payload)
	}
	if len(dead) != 4 || dead[0].RowID != 1 || dead[3].RowID != 4 || size != outbox.MaxDeadBytes {
		t.Errorf("Dead(limit 10) = %d rows, %d bytes of payloads; want the 4 oldest, MaxDeadBytes (%d)", len(dead), size, outbox.MaxDeadBytes)
	}
}

// TestRedriveAndDiscardDeadRows: an operator lists the dead rows, mends
// the cause and redrives one, which is published; discards the other.
func TestRedriveAndDiscardDeadRows(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	failIDs(e, "no-topic", outbox.Permanent(errors.New("unknown topic")))
	outboxtest.Enqueue(t, e.pool, e.table, []outbox.Message{
		{ID: "no-topic-1", Destination: "d", Key: "a", Headers: map[string]string{"H": "v"}, Payload: []byte("p1")},
		{ID: "no-topic-2", Destination: "d", Key: "b"},
	}, 1)
	e.start(t, relayConfig(e.table))
	dead := awaitDead(t, e, 2)
	if d := dead[0]; d.Message.Headers["H"] != "v" || string(d.Message.Payload) != "p1" || d.Message.CreatedAt.IsZero() || d.DeadAt.IsZero() {
		t.Errorf("dead row %+v, want the message as enqueued", d)
	}
	e.rec.FailWith(nil) // the topic was created
	ctx := testCtx(t)
	if n, err := outbox.Redrive(ctx, e.pool, e.table, dead[0].RowID, 1<<40); err != nil || n != 1 {
		t.Fatalf("Redrive = %d, %v; want 1 row", n, err)
	}
	e.rec.AwaitIDs(t, outboxtest.Timeout, []string{"no-topic-1"})
	if got := e.rec.Messages()[0]; got.Headers["H"] != "v" || string(got.Payload) != "p1" {
		t.Errorf("redriven message %+v, want it as enqueued", got)
	}
	if n, err := outbox.Discard(ctx, e.pool, e.table, dead[1].RowID); err != nil || n != 1 {
		t.Fatalf("Discard = %d, %v; want 1 row", n, err)
	}
	awaitDead(t, e, 0)
	outboxtest.AwaitPending(t, e.pool, e.table, 0)
	if n, err := outbox.Redrive(ctx, e.pool, e.table); err != nil || n != 0 {
		t.Errorf("Redrive() with no id = %d, %v; want 0, nil", n, err)
	}
	if _, err := outbox.Dead(ctx, e.pool, e.table, 0); err == nil {
		t.Error("Dead(limit 0) = nil error")
	}
}

// TestEnqueueRefusesAPayloadOverTheCap: 1 MiB by default, as configured
// otherwise; nothing of the call is written.
func TestEnqueueRefusesAPayloadOverTheCap(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, table, ob := newOutbox(t)
	big := make([]byte, outbox.DefaultMaxPayload+1)
	err := ob.Enqueue(ctx, pool, outbox.Message{Destination: "d"}, outbox.Message{Destination: "d", Payload: big})
	var me *outbox.MessageError
	if !errors.As(err, &me) || me.Index != 1 || me.Field != "Payload" || !errors.Is(err, outbox.ErrTooLarge) || !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Fatalf("Enqueue(1 MiB + 1) = %v, want a *MessageError for message 1's Payload wrapping ErrTooLarge", err)
	}
	if err := outbox.Enqueue(ctx, pool, outbox.Message{Destination: "d", Payload: big}); !errors.Is(err, outbox.ErrTooLarge) {
		t.Errorf("outbox.Enqueue(1 MiB + 1) = %v, want ErrTooLarge", err)
	}
	if err := ob.Enqueue(ctx, pool, outbox.Message{Destination: "d", Payload: big[:outbox.DefaultMaxPayload]}); err != nil {
		t.Errorf("Enqueue(1 MiB) = %v", err)
	}
	larger, err := outbox.New(outbox.Config{Table: table, MaxPayload: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := larger.Enqueue(ctx, pool, outbox.Message{Destination: "d", Payload: big}); err != nil {
		t.Errorf("Enqueue(1 MiB + 1) with a cap of 2 MiB = %v", err)
	}
	if _, all := outboxtest.Pending(t, pool, table); all != 2 {
		t.Errorf("%d rows, want the 2 under their cap", all)
	}
	if _, err := outbox.New(outbox.Config{MaxPayload: -1}); err == nil || !strings.Contains(err.Error(), "Config.MaxPayload") {
		t.Errorf("New(MaxPayload -1) = %v, want an error naming Config.MaxPayload", err)
	}
}

// TestRelayBoundsABatchByBytes: batches hold at most MaxBatchBytes of
// payload, but always a message, however large.
func TestRelayBoundsABatchByBytes(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	var msgs []outbox.Message
	for i := range 20 {
		size := 1000
		if i == 7 {
			size = 5000
		}
		msgs = append(msgs, outbox.Message{ID: fmt.Sprint("m-", i), Destination: "d", Key: "k", Payload: make([]byte, size)})
	}
	outboxtest.Enqueue(t, e.pool, e.table, msgs, 1)
	var mu sync.Mutex
	var sizes []int
	e.rec.Before(func(_ context.Context, batch []outbox.Message) {
		n := 0
		for _, m := range batch {
			n += len(m.Payload)
		}
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	})
	cfg := relayConfig(e.table)
	cfg.MaxBatchBytes = 3000
	e.start(t, cfg)
	e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
	outboxtest.CheckOrder(t, map[string][]string{"k": outboxtest.IDs(msgs)}, outboxtest.IDs(e.rec.Messages()))
	mu.Lock()
	defer mu.Unlock()
	for _, n := range sizes {
		if n > 3000 && n != 5000 {
			t.Errorf("a batch of %d bytes of payload, want at most 3000 or the one 5000-byte message alone (batches: %v)", n, sizes)
		}
	}
}

// TestRelayMemoryStaysBoundedWithLargeRows relays rows of 24 MiB each
// (with the payload cap raised) and measures the live heap where it
// peaks, in Publish, while the relay holds a batch: it stays under 64 MiB.
// Not parallel: the heap is the process's.
func TestRelayMemoryStaysBoundedWithLargeRows(t *testing.T) {
	const size, rows, limit = 24 << 20, 3, 64 << 20
	pool := pgstoretest.Pool(t, 2)
	table := outboxtest.Table(t, pool)
	// A pool of its own, closed before the relay runs: its connections
	// keep the buffers they wrote the rows with.
	enqueuer, err := pgxpool.New(context.Background(), pgstoretest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer enqueuer.Close()
	ob, err := outbox.New(outbox.Config{Table: table, MaxPayload: size})
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("x"), size)
	for i := range rows {
		payload[0] = byte('a' + i)
		err := pgx.BeginFunc(testCtx(t), enqueuer, func(tx pgx.Tx) error {
			return ob.Enqueue(testCtx(t), tx, outbox.Message{ID: fmt.Sprint("big-", i), Destination: "d", Key: fmt.Sprint("k", i%2), Payload: payload})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	payload = nil
	enqueuer.Close()

	var (
		published atomic.Int64
		peak      atomic.Uint64
	)
	measure := func() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		for {
			p := peak.Load()
			if ms.HeapAlloc <= p || peak.CompareAndSwap(p, ms.HeapAlloc) {
				return
			}
		}
	}
	pub := publisherFunc(func(_ context.Context, msgs []outbox.Message) error {
		measure() // the batch is in memory, read and decoded
		for _, m := range msgs {
			if len(m.Payload) != size || m.Payload[0] != byte('a'+published.Load()) {
				return fmt.Errorf("message %s: %d bytes, or not the next row", m.ID, len(m.Payload))
			}
			published.Add(1)
		}
		return nil
	})
	measure()
	before := peak.Load()
	cfg := relayConfig(table)
	cfg.Partitions = 1 // one key order for all: the rows are checked in order
	r, err := outbox.NewRelay(pool, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := outboxtest.RunRelay(t, r)
	outboxtest.AwaitPending(t, pool, table, 0)
	stop()
	if n := published.Load(); n != rows {
		t.Fatalf("%d rows published, want %d", n, rows)
	}
	t.Logf("live heap: %d MiB before the relay, at most %d MiB while it published %d rows of %d MiB",
		before>>20, peak.Load()>>20, rows, size>>20)
	if p := peak.Load(); p > limit {
		t.Errorf("the live heap peaked at %d MiB while relaying rows of %d MiB, want under %d MiB", p>>20, size>>20, limit>>20)
	}
}

// TestMigrateUpgradesATableOfThePreviousVersion: a table created by the
// first migration alone, with a pending row that already failed, is
// upgraded in place by Migrate (twice: idempotent), and the row is
// relayed.
func TestMigrateUpgradesATableOfThePreviousVersion(t *testing.T) {
	t.Parallel()
	pool := pgstoretest.Pool(t, 4)
	schema := pgstoretest.Schema(t, pool)
	table := schema + ".outbox"
	createV1(t, pool, table)
	ctx := testCtx(t)
	if _, err := pool.Exec(ctx, `INSERT INTO "`+schema+`"."outbox" (message_id, destination, key, key_hash, payload, attempts, last_error)
		VALUES ('old', 'd', 'k', 1, 'p', 2, 'refused')`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := outbox.Migrate(ctx, pool, table); err != nil {
			t.Fatalf("Migrate over a table of the previous version: %v", err)
		}
	}
	if dead, err := outbox.Dead(ctx, pool, table, 10); err != nil || len(dead) != 0 {
		t.Fatalf("Dead after the upgrade = %v, %v; want none", dead, err)
	}
	rec := outboxtest.NewRecorder()
	r, err := outbox.NewRelay(pool, rec, relayConfig(table))
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RunRelay(t, r)
	rec.AwaitIDs(t, outboxtest.Timeout, []string{"old"})
	outboxtest.AwaitPending(t, pool, table, 0)
}

// TestRelayChargesNoAttemptWhileTheBrokerIsUnavailable: for its first
// rounds the broker cannot be reached, in each of the ways a Publisher
// reports it (the whole call or each message wrapped with
// outbox.Unavailable, a message without an answer before PublishTimeout, a
// call that failed once PublishTimeout ran out). With MaxAttempts 1 no row
// dies and none is charged an attempt; the relay backs off as a whole, the
// events say why, and once the broker is back every message is published
// once, each key's in order.
func TestRelayChargesNoAttemptWhileTheBrokerIsUnavailable(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	const rounds = 8
	var calls atomic.Int64
	pub := publisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		n := calls.Add(1)
		if n > rounds {
			return e.rec.Publish(ctx, msgs)
		}
		errs := make([]error, len(msgs))
		switch n % 4 {
		case 0:
			return outbox.Unavailable(errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
		case 1:
			for i := range errs {
				errs[i] = outbox.Unavailable(errors.New("connection lost"))
			}
		case 2:
			<-ctx.Done() // PublishTimeout
			for i := range errs {
				errs[i] = fmt.Errorf("no ack: %w", ctx.Err())
			}
		case 3:
			<-ctx.Done()
			return errors.New("the broker did not answer")
		}
		return outbox.NewPublishError(errs)
	})
	msgs, want := outboxtest.Messages(60, 6, "d")
	outboxtest.Enqueue(t, e.pool, e.table, msgs, 1)
	cfg := relayConfig(e.table)
	cfg.MaxAttempts, cfg.PublishTimeout = 1, 20*time.Millisecond
	ev := newEvents()
	cfg.Observer = ev.observe
	r, err := outbox.NewRelay(e.pool, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RunRelay(t, r)

	for range rounds {
		got := ev.await(t, "failed publish", func(e outbox.Event) bool { return e.Op == outbox.OpPublish })
		if got.Sent != 0 || got.Failed == 0 || got.Unavailable != got.Failed || got.Err == nil {
			t.Errorf("OpPublish %+v while the broker is unavailable, want every message failed as unavailable", got)
		}
		ev.await(t, "backoff", func(e outbox.Event) bool { return e.Op == outbox.OpBackoff })
	}
	e.rec.AwaitIDs(t, outboxtest.Timeout, outboxtest.IDs(msgs))
	if dups := outboxtest.CheckOrder(t, want, outboxtest.IDs(e.rec.Messages())); dups > 0 {
		t.Errorf("%d duplicates, though no failed message reached the broker", dups)
	}
	outboxtest.AwaitPending(t, e.pool, e.table, 0)
	if dead := awaitDead(t, e, 0); len(dead) != 0 {
		t.Errorf("dead rows %+v, want none", dead)
	}
	var charged int
	if err := e.pool.QueryRow(testCtx(t), "SELECT count(*) FROM "+quoteTable(e.table)+" WHERE attempts > 0").Scan(&charged); err != nil {
		t.Fatal(err)
	}
	if charged != 0 {
		t.Errorf("%d rows charged an attempt, want none", charged)
	}
	if lag, err := r.Lag(testCtx(t)); err != nil || lag.Dead != 0 {
		t.Errorf("Lag() = %+v, %v; want no dead row", lag, err)
	}
}

// TestRelayChargesARefusalBesideAnUnavailableBroker: in the same calls, the
// broker refuses one message and cannot be reached for the others. With
// MaxAttempts 1 the refused message dies at its first attempt; the others
// are not charged and are published once the broker is back.
func TestRelayChargesARefusalBesideAnUnavailableBroker(t *testing.T) {
	t.Parallel()
	e := newRelayEnv(t)
	var calls atomic.Int64
	pub := publisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		if calls.Add(1) > 3 {
			return e.rec.Publish(ctx, msgs)
		}
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			if m.ID == "poison" {
				errs[i] = errors.New("refused")
			} else {
				errs[i] = outbox.Unavailable(errors.New("partition leader unreachable"))
			}
		}
		return outbox.NewPublishError(errs)
	})
	msgs := []outbox.Message{
		{ID: "a-0", Destination: "d", Key: "a"},
		{ID: "poison", Destination: "d", Key: "p"},
		{ID: "a-1", Destination: "d", Key: "a"},
		{ID: "b-0", Destination: "d", Key: "b"},
	}
	outboxtest.Enqueue(t, e.pool, e.table, msgs, 1)
	cfg := relayConfig(e.table)
	cfg.MaxAttempts = 1
	r, err := outbox.NewRelay(e.pool, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RunRelay(t, r)
	e.rec.AwaitIDs(t, outboxtest.Timeout, []string{"a-0", "a-1", "b-0"})
	outboxtest.CheckOrder(t, map[string][]string{"a": {"a-0", "a-1"}, "b": {"b-0"}}, outboxtest.IDs(e.rec.Messages()))
	dead := awaitDead(t, e, 1)
	if d := dead[0]; d.Message.ID != "poison" || d.Attempts != 1 || !strings.Contains(d.LastError, "refused") {
		t.Errorf("dead row %+v, want poison after 1 attempt", d)
	}
	outboxtest.AwaitPending(t, e.pool, e.table, 0)
}
