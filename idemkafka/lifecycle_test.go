package idemkafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/internal/adaptertest"
)

func TestNewNeedsScopeAndPoisonDecisions(t *testing.T) {
	g := newGuard(t, newMem(t), idem.Config{})
	h := func(context.Context, *kgo.Record) error { return nil }
	for _, tc := range []struct {
		name string
		opts []idemkafka.Option
		want string // in the error; "" for none
	}{
		{"none", nil, "no scope decision"},
		{"both", []idemkafka.Option{idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithScope(func(*kgo.Record) string { return "" })}, "choose one"},
		{"shared", []idemkafka.Option{idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison()}, ""},
		{"scoped", []idemkafka.Option{idemkafka.WithScope(func(r *kgo.Record) string { return r.Topic }), idemkafka.WithDeadLetter("orders.dlq")}, ""},
		{"no poison decision", []idemkafka.Option{idemkafka.WithSharedScope()}, "no poison decision. Pass WithDeadLetter(topic)"},
		{"both poison decisions", []idemkafka.Option{idemkafka.WithSharedScope(), idemkafka.WithDeadLetter("orders.dlq"), idemkafka.WithDiscardPoison()}, "choose one"},
		{"empty dead-letter topic", []idemkafka.Option{idemkafka.WithSharedScope(), idemkafka.WithDeadLetter("")}, `WithDeadLetter("")`},
		{"bad attempts", []idemkafka.Option{idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithMaxAttempts(0)}, "WithMaxAttempts(0)"},
		{"nil scope", []idemkafka.Option{idemkafka.WithScope(nil)}, "WithScope(nil)"},
		{"bad batch", []idemkafka.Option{idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithMaxBatch(0)}, "WithMaxBatch(0)"},
		{"bad backoff", []idemkafka.Option{idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithRetryBackoff(time.Second, time.Millisecond)}, "WithRetryBackoff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := idemkafka.New(g, h, tc.opts...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "idemkafka: ")):
				t.Fatalf("New: %v, want an idemkafka error saying %q", err, tc.want)
			}
		})
	}
	_, err := idemkafka.New(g, h, idemkafka.WithDiscardPoison())
	adaptertest.CheckConsumerNoScope(t, err, "idemkafka", "*kgo.Record")
	if _, err := idemkafka.New(nil, h, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison()); err == nil {
		t.Fatal("New with a nil Guard: no error")
	}
}

func TestRunRefusesAClientThatCouldLoseRecords(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 1})
	topic, group := c.Name("orders"), c.Name("g")
	produce(t, c, keyed(topic, 0, "k", "v"))
	g := newGuard(t, newMem(t), idem.Config{})
	ran := atomic.Bool{}
	cons, err := idemkafka.New(g, func(context.Context, *kgo.Record) error { ran.Store(true); return nil }, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison())
	if err != nil {
		t.Fatal(err)
	}
	seed := kgo.SeedBrokers(c.ListenAddrs()...)
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		want string
	}{
		{"no group", []kgo.Opt{seed, kgo.ConsumeTopics(topic)}, "kgo.ConsumerGroup"},
		{"no topics", append([]kgo.Opt{seed, kgo.ConsumerGroup(group)}, cons.ClientOpts()...), "no topics"},
		{"autocommit", []kgo.Opt{seed, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.BlockRebalanceOnPoll()}, "autocommits"},
		{"rebalance not blocked", []kgo.Opt{seed, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit()}, "BlockRebalanceOnPoll"},
		{"without the callbacks", []kgo.Opt{seed, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll()}, "OnPartitionsAssigned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := kgo.NewClient(tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
			defer cancel()
			err = cons.Run(ctx, cl)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want an error naming %q", err, tc.want)
			}
		})
	}
	if ran.Load() {
		t.Fatal("a refused client's records were handled")
	}
}

// A partition whose handler is stuck does not hold up the others, and
// each partition is handled in offset order.
func TestStuckPartitionDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 2})
	topic, group := c.Name("orders"), c.Name("payments")
	var recs []*kgo.Record
	var keys []string
	for i := range 200 {
		k := fmt.Sprintf("k-%d-%03d", i%2, i)
		keys = append(keys, k)
		recs = append(recs, keyed(topic, int32(i%2), k, k))
	}
	produce(t, c, recs...)

	l := newLedger()
	b := newBlocker("k-0-000") // the first record of partition 0
	var mu sync.Mutex
	last := map[int32]int64{0: -1, 1: -1}
	var order []string
	start(t, c, group, topic, newGuard(t, newMem(t), idem.Config{}), func(ctx context.Context, r *kgo.Record) error {
		b.hold(r)
		mu.Lock()
		if r.Offset <= last[r.Partition] {
			order = append(order, fmt.Sprintf("partition %d: offset %d after %d", r.Partition, r.Offset, last[r.Partition]))
		}
		last[r.Partition] = r.Offset
		mu.Unlock()
		return l.handler(ctx, r)
	}, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithMaxBatch(10))
	b.wait(t)
	await(t, groupTimeout, "partition 1 to be handled while partition 0 is stuck", func() bool { return l.count() == 100 })
	close(b.release)
	await(t, groupTimeout, "every key to be handled", func() bool { return l.count() == 200 })
	l.wantOnce(t, keys)
	if len(order) > 0 {
		t.Fatalf("records out of order: %v", order)
	}
}

// At shutdown the handler in flight finishes, no other starts, the
// finished offsets are committed: a new member starts where it stopped.
func TestGracefulShutdownCommitsWhatFinished(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 1})
	topic, group := c.Name("orders"), c.Name("payments")
	recs, keys := keyedRange(topic, 100)
	produce(t, c, recs...)
	store := newMem(t)
	l := newLedger()
	var inFlight, cancelled atomic.Int32
	slow := func(ctx context.Context, r *kgo.Record) error {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			cancelled.Add(1)
			return ctx.Err()
		}
		return l.handler(ctx, r)
	}
	m := start(t, c, group, topic, newGuard(t, store, idem.Config{}), slow, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithCommitInterval(time.Hour))
	await(t, groupTimeout, "some records to be handled", func() bool { return l.count() >= 10 })
	if err := m.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if inFlight.Load() != 0 || cancelled.Load() != 0 {
		t.Fatalf("after Run returned: %d handlers in flight, %d cancelled; want 0 and 0", inFlight.Load(), cancelled.Load())
	}
	done := int64(l.count())
	if got := c.Committed(group, topic)[0]; got != done {
		t.Fatalf("committed offset %d after %d records finished, want %d", got, done, done)
	}
	start(t, c, group, topic, newGuard(t, store, idem.Config{}), slow, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison())
	await(t, groupTimeout, "the rest to be handled", func() bool { return l.count() == len(keys) })
	l.wantOnce(t, keys)
}

func TestUnkeyedRecordsRunUnguardedWhenAsked(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 1})
	topic, group := c.Name("orders"), c.Name("payments")
	produce(t, c, keyed(topic, 0, "k-1", "a"), &kgo.Record{Topic: topic, Value: []byte("b")}, keyed(topic, 0, "k-1", "a"))
	var mu sync.Mutex
	var seen []string
	var finished atomic.Int64
	start(t, c, group, topic, newGuard(t, newMem(t), idem.Config{}), func(_ context.Context, r *kgo.Record) error {
		mu.Lock()
		seen = append(seen, string(r.Value))
		mu.Unlock()
		return nil
	}, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithUnkeyedUnguarded(), idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
		if e.Kind == idemkafka.EventBatch {
			finished.Add(int64(e.Records))
		}
	}))
	await(t, groupTimeout, "the records to be finished", func() bool { return finished.Load() == 3 })
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "a,b" {
		t.Fatalf("handled %v, want [a b]: the unkeyed record in its place, the duplicate not at all", seen)
	}
}

func TestScopesSeparateTenants(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]int32{"orders": 1})
	topic, group := c.Name("orders"), c.Name("payments")
	rec := func(tenant string) *kgo.Record {
		r := keyed(topic, 0, "order-1", "v")
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "tenant", Value: []byte(tenant)})
		return r
	}
	produce(t, c, rec("acme"), rec("globex"), rec("acme"))
	var mu sync.Mutex
	runs := map[string]int{}
	var finished atomic.Int64
	start(t, c, group, topic, newGuard(t, newMem(t), idem.Config{}), func(_ context.Context, r *kgo.Record) error {
		v, _ := header(r, "tenant")
		mu.Lock()
		runs[v]++
		mu.Unlock()
		return nil
	}, idemkafka.WithScope(func(r *kgo.Record) string { v, _ := header(r, "tenant"); return v }), idemkafka.WithDiscardPoison(),
		idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
			if e.Kind == idemkafka.EventBatch {
				finished.Add(int64(e.Records))
			}
		}))
	await(t, groupTimeout, "the records to be finished", func() bool { return finished.Load() == 3 })
	mu.Lock()
	defer mu.Unlock()
	if runs["acme"] != 1 || runs["globex"] != 1 {
		t.Fatalf("runs by tenant %v, want one each: the same key in two scopes is two operations", runs)
	}
}
