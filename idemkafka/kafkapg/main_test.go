package kafkapg_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemkafka/internal/kafkatest"
	"github.com/idemgo/idem/idemkafka/kafkapg"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild()) // a consumer process of the kill test
	}
	goleak.VerifyTestMain(m)
}

const groupTimeout = kafkatest.GroupTimeout

// pgEnv is a test's schema on the PostgreSQL server: the records table,
// the offsets table and a ledger of effects, dropped when the test ends.
type pgEnv struct {
	pool    *pgxpool.Pool
	schema  string
	records string
	offsets string
	ledger  string
}

// newPG creates the test's schema and tables; it skips the test when the
// server is unreachable (fails under IDEM_REQUIRE_SERVICES=1).
func newPG(t testing.TB) *pgEnv {
	t.Helper()
	pool := pgstoretest.Pool(t, 20)
	e := &pgEnv{pool: pool, schema: pgstoretest.Schema(t, pool)}
	e.records, e.offsets, e.ledger = e.schema+".idem_records", e.schema+".kafka_offsets", e.schema+".ledger"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgstore.Migrate(ctx, pool, e.records); err != nil {
		t.Fatal(err)
	}
	if err := kafkapg.Migrate(ctx, pool, e.offsets); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+e.ledger+" (id text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"); err != nil {
		t.Fatal(err)
	}
	return e
}

// record is the ledger's effect of a record: its id (the key, or the
// value of an unkeyed record) inserted in the consumer's transaction.
func (e *pgEnv) record(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+e.ledger+" (id) VALUES ($1)", ledgerID(r))
	return err
}

func ledgerID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == idemkafka.DefaultKeyHeader {
			return string(h.Value)
		}
	}
	return string(r.Value)
}

// effects returns the ledger's ids and how often each was inserted.
func (e *pgEnv) effects(t testing.TB) map[string]int {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), "SELECT id, count(*) FROM "+e.ledger+" GROUP BY id")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantLedger fails unless the ledger holds each of ids exactly once and
// nothing else.
func (e *pgEnv) wantLedger(t testing.TB, ids []string) {
	t.Helper()
	got := e.effects(t)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("ledger: %s inserted %d times, want 1", id, got[id])
		}
	}
	if len(got) != len(ids) {
		t.Errorf("ledger: %d ids, want %d", len(got), len(ids))
	}
}

// storedAtEnds waits until the offsets table holds, for every partition of
// topic with records, the partition's end.
func (e *pgEnv) storedAtEnds(t testing.TB, c *kafkatest.Cluster, group, topic string) {
	t.Helper()
	ends := c.EndOffsets(topic)
	kafkatest.Await(t, groupTimeout, "the stored offsets of "+topic+" to reach the partitions' ends", func() bool {
		for p, end := range ends {
			next, err := kafkapg.StoredOffset(context.Background(), e.pool, e.offsets, group, topic, p)
			if err != nil {
				t.Fatal(err)
			}
			if end > 0 && next != end {
				return false
			}
		}
		return true
	})
}

// newCluster returns the tests' Apache Kafka with the topics given (name →
// partitions) created under c.Name for t.
func newCluster(t testing.TB, topics map[string]int32) *kafkatest.Cluster {
	t.Helper()
	return kafkatest.NewCluster(t, topics)
}

var (
	produce    = kafkatest.Produce
	keyed      = kafkatest.Keyed
	clientOpts = kafkatest.ClientOpts
)

// orders returns n records over partitions, a keyed order each, every
// fifth published again on another partition, and every seventh without
// a key (its value is its ledger id); and the ids the ledger must hold.
func orders(topic string, partitions, n int) ([]*kgo.Record, []string) {
	var recs []*kgo.Record
	var ids []string
	for i := range n {
		p := int32(i % partitions)
		if i%7 == 3 {
			id := fmt.Sprintf("unkeyed-%04d", i)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(id)})
			ids = append(ids, id)
			continue
		}
		k := fmt.Sprintf("order-%04d", i)
		recs = append(recs, keyed(topic, p, k, k))
		if i%5 == 0 {
			recs = append(recs, keyed(topic, int32((i+1)%partitions), k, k))
		}
		ids = append(ids, k)
	}
	return recs, ids
}

// run creates a consumer, its client, and runs it until t ends; it
// returns a function that stops it gracefully and returns Run's error.
func run(t testing.TB, addrs []string, group, topic string, db kafkapg.DB, h kafkapg.Handler, opts ...kafkapg.Option) func() error {
	t.Helper()
	c, err := kafkapg.New(db, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(clientOpts(addrs, group, topic), c.ClientOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := c.Run(ctx, cl)
		if err != nil && ctx.Err() == nil {
			t.Errorf("Run: %v", err) // it ended before its time
		}
		done <- err
	}()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(groupTimeout):
				runErr = fmt.Errorf("Run did not return within %v", groupTimeout)
			}
			cl.Close()
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	return stop
}
