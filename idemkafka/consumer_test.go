package idemkafka_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
)

// wantCommitted fails unless the group committed, for every partition of
// topic, the partition's end: every record is done.
func wantCommitted(t testing.TB, c *cluster, group, topic string) {
	t.Helper()
	ends := c.EndOffsets(topic)
	await(t, groupTimeout, "the group's commits to reach the partitions' ends", func() bool {
		committed := c.Committed(group, topic)
		for p, end := range ends {
			if end > 0 && committed[p] != end {
				return false
			}
		}
		return true
	})
}

func TestDuplicatesHaveOneEffect(t *testing.T) {
	t.Parallel()
	const orders = 200
	c := newCluster(t, map[string]int32{"orders": 4})
	topic, group := c.Name("orders"), c.Name("payments")
	// Each order is published once, a fifth of them two or three more
	// times, on other partitions too: a producer retrying after a timeout.
	var recs []*kgo.Record
	keys := make([]string, orders)
	dups := 0
	for i := range orders {
		keys[i] = fmt.Sprintf("order-%04d", i)
		v := fmt.Sprintf(`{"order":%d}`, i)
		recs = append(recs, keyed(topic, int32(i%4), keys[i], v))
		if i%5 == 0 {
			for d := range 1 + i%2 {
				recs = append(recs, keyed(topic, int32((i+d+1)%4), keys[i], v))
				dups++
			}
		}
	}
	produce(t, c, recs...)

	l := newLedger()
	var replayed, finished atomic.Int64
	g := newGuard(t, newMem(t), idem.Config{})
	m := start(t, c, group, topic, g, l.handler, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
		if e.Kind == idemkafka.EventBatch {
			replayed.Add(int64(e.Replayed))
			finished.Add(int64(e.Records))
		}
	}))
	await(t, groupTimeout, "every record to be finished", func() bool { return finished.Load() == int64(len(recs)) })
	wantCommitted(t, c, group, topic)
	if err := m.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	l.wantOnce(t, keys)
	if replayed.Load() != int64(dups) {
		t.Fatalf("%d records replayed, want the %d duplicates", replayed.Load(), dups)
	}
}

// commitWatch checks, from a member's events, that it never commits a
// partition past the last record it finished there.
type commitWatch struct {
	t        testing.TB
	finished map[string]int64 // "topic/partition" → the next offset after the last finished record
	batches  atomic.Int64     // records finished
}

func newCommitWatch(t testing.TB) *commitWatch {
	return &commitWatch{t: t, finished: map[string]int64{}}
}

// observer is called on the member's goroutines: the partitions' workers
// and commits are serialized per partition by the consumer, and the map
// is only touched here, under the consumer's own ordering, so a mutex
// guards it anyway.
func (w *commitWatch) observer() idemkafka.Option {
	var mu = make(chan struct{}, 1)
	return idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
		mu <- struct{}{}
		defer func() { <-mu }()
		tp := fmt.Sprintf("%s/%d", e.Topic, e.Partition)
		switch e.Kind {
		case idemkafka.EventBatch:
			w.finished[tp] = e.Offset
			w.batches.Add(int64(e.Records))
		case idemkafka.EventCommit:
			if f, ok := w.finished[tp]; !ok || e.Offset > f {
				w.t.Errorf("%s committed at %d, past its last finished record (next offset %d, seen %v)", tp, e.Offset, f, ok)
			}
		}
	})
}

func TestRebalanceMidStream(t *testing.T) {
	t.Parallel()
	const orders = 600
	c := newCluster(t, map[string]int32{"orders": 6})
	topic, group := c.Name("orders"), c.Name("payments")
	store := newMem(t)
	l := newLedger()
	slow := func(ctx context.Context, r *kgo.Record) error {
		k := headerKey(r)
		l.enter(k)
		time.Sleep(2 * time.Millisecond) // long enough for rebalances to land mid-handler
		l.leave(k, true)
		return nil
	}
	keys := make([]string, orders)
	for i := range keys {
		keys[i] = fmt.Sprintf("order-%04d", i)
	}
	// The producer publishes throughout, each order once and every
	// seventh again, while members join and leave.
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for lo := 0; lo < orders; lo += 20 {
			var recs []*kgo.Record
			for i := lo; i < lo+20; i++ {
				recs = append(recs, keyed(topic, int32(i%6), keys[i], keys[i]))
				if i%7 == 0 {
					recs = append(recs, keyed(topic, int32((i+1)%6), keys[i], keys[i]))
				}
			}
			produce(t, c, recs...)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	newMember := func() (*member, *commitWatch) {
		w := newCommitWatch(t)
		g := newGuard(t, store, idem.Config{Lease: 30 * time.Second})
		return start(t, c, group, topic, g, slow, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithCommitInterval(100*time.Millisecond), w.observer()), w
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	m1, w1 := newMember()
	await(t, groupTimeout, "the first member to finish records", func() bool { return w1.batches.Load() > 50 })
	_, w2 := newMember()
	if err := c.WaitGroupStable(ctx, group, 2); err != nil {
		t.Fatal(err)
	}
	await(t, groupTimeout, "the second member to finish records", func() bool { return w2.batches.Load() > 0 })
	_, w3 := newMember()
	if err := c.WaitGroupStable(ctx, group, 3); err != nil {
		t.Fatal(err)
	}
	await(t, groupTimeout, "the third member to finish records", func() bool { return w3.batches.Load() > 0 })
	if err := m1.stop(); err != nil { // the first leaves mid-stream
		t.Fatalf("first member's Run: %v", err)
	}
	<-produced
	await(t, groupTimeout, "every order to be charged", func() bool { return l.count() == orders })
	wantCommitted(t, c, group, topic)
	l.wantOnce(t, keys)
}

// Each EventBatch reports the partition's lag after the batch: its high
// watermark at the last fetch less the next offset, down to 0 at the end.
func TestBatchEventsReportLag(t *testing.T) {
	t.Parallel()
	const n = 50
	c := newCluster(t, map[string]int32{"orders": 1})
	topic, group := c.Name("orders"), c.Name("payments")
	recs, _ := keyedRange(topic, n)
	produce(t, c, recs...) // all before the first fetch: the high watermark is n throughout
	var mu sync.Mutex
	var batches []idemkafka.Event
	g := newGuard(t, newMem(t), idem.Config{})
	start(t, c, group, topic, g, func(context.Context, *kgo.Record) error { return nil }, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithMaxBatch(7),
		idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
			if e.Kind == idemkafka.EventBatch {
				mu.Lock()
				batches = append(batches, e)
				mu.Unlock()
			}
		}))
	await(t, groupTimeout, "every record to be finished", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(batches) > 0 && batches[len(batches)-1].Offset == n
	})
	mu.Lock()
	defer mu.Unlock()
	if len(batches) < n/7 {
		t.Fatalf("%d batches of at most 7 records for %d records", len(batches), n)
	}
	for _, e := range batches {
		if e.Lag != n-e.Offset {
			t.Errorf("batch up to offset %d: lag %d, want %d", e.Offset, e.Lag, n-e.Offset)
		}
	}
}
