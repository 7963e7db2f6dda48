package kafkapg_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemkafka/kafkapg"
	"github.com/idemgo/idem/internal/adaptertest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/storage"
)

func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		opts []kafkapg.Option
	}{
		{"per batch", nil},
		{"per record", []kafkapg.Option{kafkapg.WithPerRecordTransactions()}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := newPG(t)
			c := newCluster(t, map[string]int32{"orders": 4})
			topic, group := c.Name("orders"), c.Name("payments")
			recs, ids := orders(topic, 4, 300)
			produce(t, c.ListenAddrs(), recs...)
			opts := append([]kafkapg.Option{
				kafkapg.WithRecordsTable(e.records), kafkapg.WithOffsetsTable(e.offsets),
				kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithUnkeyedUnguarded(), idemkafka.WithMaxBatch(50)),
			}, mode.opts...)
			stop := run(t, c.ListenAddrs(), group, topic, e.pool, e.record, opts...)
			e.storedAtEnds(t, c, group, topic)
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			e.wantLedger(t, ids)
		})
	}
}

func TestPermanentErrorUndoesTheRecordAlone(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	c := newCluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	topic, group, dlq := c.Name("orders"), c.Name("payments"), c.Name("orders.dlq")
	recs := []*kgo.Record{keyed(topic, 0, "k-1", "v"), keyed(topic, 0, "declined", "v"), keyed(topic, 0, "k-3", "v")}
	produce(t, c.ListenAddrs(), recs...)
	var dead atomic.Int32
	run(t, c.ListenAddrs(), group, topic, e.pool, func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		if err := e.record(ctx, tx, r); err != nil {
			return err
		}
		if ledgerID(r) == "declined" {
			return idem.Permanent(errors.New("card declined")) // after its write: undone
		}
		return nil
	}, kafkapg.WithRecordsTable(e.records), kafkapg.WithOffsetsTable(e.offsets),
		kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDeadLetter(dlq), idemkafka.WithObserver(func(_ context.Context, ev idemkafka.Event) {
			if ev.Kind == idemkafka.EventDeadLettered && strings.Contains(ev.Err.Error(), "card declined") && ev.Offset == 1 {
				dead.Add(1)
			}
		})))
	e.storedAtEnds(t, c, group, topic)
	e.wantLedger(t, []string{"k-1", "k-3"})
	if dead.Load() != 1 {
		t.Fatalf("%d dead letters of the declined record, want 1", dead.Load())
	}
	var status int16
	if err := e.pool.QueryRow(context.Background(), "SELECT status FROM "+e.records+" WHERE position('declined'::bytea IN key) > 0").Scan(&status); err != nil || storage.Status(status) != storage.StatusFailed {
		t.Fatalf("the declined key's record: status %d, %v; want Failed", status, err)
	}
}

func TestRetryableErrorKeepsWhatCameBefore(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	c := newCluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	topic, group, dlq := c.Name("orders"), c.Name("payments"), c.Name("orders.dlq")
	recs := []*kgo.Record{keyed(topic, 0, "k-1", "v"), keyed(topic, 0, "flaky", "v"), keyed(topic, 0, "poison", "v"), keyed(topic, 0, "k-4", "v")}
	produce(t, c.ListenAddrs(), recs...)
	var mu sync.Mutex
	tries := map[string]int{}
	var committedBeforeFlaky atomic.Bool
	run(t, c.ListenAddrs(), group, topic, e.pool, func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		id := ledgerID(r)
		mu.Lock()
		tries[id]++
		n := tries[id]
		mu.Unlock()
		if id == "flaky" && n == 2 {
			// Its first failure committed the record before it alone.
			next, _ := kafkapg.StoredOffset(ctx, e.pool, e.offsets, group, topic, 0)
			committedBeforeFlaky.Store(next == 1)
		}
		if id == "flaky" && n < 3 || id == "poison" {
			return errors.New("provider timed out")
		}
		return e.record(ctx, tx, r)
	}, kafkapg.WithRecordsTable(e.records), kafkapg.WithOffsetsTable(e.offsets),
		kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDeadLetter(dlq), idemkafka.WithMaxAttempts(3),
			idemkafka.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond)))
	e.storedAtEnds(t, c, group, topic)
	e.wantLedger(t, []string{"k-1", "flaky", "k-4"})
	if tries["flaky"] != 3 {
		t.Fatalf("the flaky record was tried %d times, want 3", tries["flaky"])
	}
	if !committedBeforeFlaky.Load() {
		t.Fatal("the record before the failing one was not committed before its retry")
	}
	mu.Lock()
	defer mu.Unlock()
	if tries["poison"] != 3 {
		t.Fatalf("the poison record was tried %d times, want 3 (WithMaxAttempts), then dead-lettered", tries["poison"])
	}
}

func TestStartsAtTheStoredOffset(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	c := newCluster(t, map[string]int32{"orders": 2})
	topic, group := c.Name("orders"), c.Name("payments")
	recs, _ := orders(topic, 2, 100)
	produce(t, c.ListenAddrs(), recs...)
	// The database says partition 0 is done up to offset 30, Kafka knows
	// nothing: the consumer starts there, as after a crash that committed
	// to PostgreSQL and not to Kafka.
	if _, err := e.pool.Exec(context.Background(), "INSERT INTO "+e.offsets+" (consumer_group, topic, partition, next_offset, leader_epoch) VALUES ($1, $2, 0, 30, -1)", group, topic); err != nil {
		t.Fatal(err)
	}
	var early atomic.Int32
	run(t, c.ListenAddrs(), group, topic, e.pool, func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
		if r.Partition == 0 && r.Offset < 30 {
			early.Add(1)
		}
		return e.record(ctx, tx, r)
	}, kafkapg.WithRecordsTable(e.records), kafkapg.WithOffsetsTable(e.offsets),
		kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithUnkeyedUnguarded()))
	e.storedAtEnds(t, c, group, topic)
	if early.Load() != 0 {
		t.Fatalf("%d records of partition 0 before its stored offset were handled", early.Load())
	}
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	h := func(context.Context, pgx.Tx, *kgo.Record) error { return nil }
	for _, tc := range []struct {
		name string
		opts []kafkapg.Option
		want string
	}{
		{"no scope decision", nil, "no scope decision"},
		{"no poison decision", []kafkapg.Option{kafkapg.WithConsumerOptions(idemkafka.WithSharedScope())}, "no poison decision"},
		{"bad offsets table", []kafkapg.Option{kafkapg.WithOffsetsTable("a.b.c"), kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison())}, "WithOffsetsTable"},
		{"bad records table", []kafkapg.Option{kafkapg.WithRecordsTable("Bad"), kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison())}, "Table"},
		{"bad lock timeout", []kafkapg.Option{kafkapg.WithLockTimeout(0), kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison())}, "WithLockTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kafkapg.New(noDB{}, h, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error naming %q", err, tc.want)
			}
		})
	}
	_, err := kafkapg.New(noDB{}, h, kafkapg.WithConsumerOptions(idemkafka.WithDiscardPoison()))
	adaptertest.CheckConsumerNoScope(t, err, "kafkapg", "*kgo.Record")
	if _, err := kafkapg.New(noDB{}, h, kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison())); err != nil {
		t.Fatalf("New with a scope and a poison decision: %v", err)
	}
}

// noDB is a DB for tests that never reach the database.
type noDB struct{}

func (noDB) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) {
	return nil, errors.New("no database")
}
func (noDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("no database")
}

// A batch that meets a key held by a plain Guard's lease commits the
// records before it and leaves the keys after it as it found them: once
// the lease's holder stores its outcome, they run at once, on their first
// attempt, rather than wait out leases that no one holds.
func TestBusyKeyLeavesTheRestUnclaimed(t *testing.T) {
	t.Parallel()
	const ns = "charges"
	e := newPG(t)
	c := newCluster(t, map[string]int32{"orders": 1})
	topic, group := c.Name("orders"), c.Name("payments")
	store, err := pgstore.New(e.pool, pgstore.Config{Table: e.records})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := idem.New(store, idem.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	held, release, plainDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := plain.Do(context.Background(), "k-2", []byte("v"), func(context.Context) ([]byte, error) {
			close(held)
			<-release
			return nil, nil
		})
		plainDone <- err
	}()
	<-held
	produce(t, c.ListenAddrs(), keyed(topic, 0, "k-1", "v"), keyed(topic, 0, "k-2", "v"), keyed(topic, 0, "k-3", "v"), keyed(topic, 0, "k-4", "v"))
	var once sync.Once
	run(t, c.ListenAddrs(), group, topic, e.pool, e.record, kafkapg.WithRecordsTable(e.records), kafkapg.WithOffsetsTable(e.offsets), kafkapg.WithNamespace(ns),
		kafkapg.WithConsumerOptions(idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond),
			idemkafka.WithObserver(func(_ context.Context, ev idemkafka.Event) {
				if ev.Kind == idemkafka.EventRetry && errors.Is(ev.Err, idem.ErrInProgress) && ev.Offset == 1 {
					once.Do(func() { close(release) }) // the batch met the held key: let its holder finish
				}
			})))
	e.storedAtEnds(t, c, group, topic)
	if err := <-plainDone; err != nil {
		t.Fatalf("the plain Guard's Do: %v", err)
	}
	e.wantLedger(t, []string{"k-1", "k-3", "k-4"})
	for _, k := range []string{"k-3", "k-4"} {
		var attempt int
		if err := e.pool.QueryRow(context.Background(), "SELECT attempt FROM "+e.records+" WHERE position($1::bytea IN key) > 0", []byte(k)).Scan(&attempt); err != nil || attempt != 1 {
			t.Errorf("%s's record: attempt %d, %v; want 1 (claimed once, when its turn came)", k, attempt, err)
		}
	}
}
