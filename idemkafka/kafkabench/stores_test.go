package kafkabench_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemkafka"
	"github.com/idemgo/idem/idemkafka/internal/kafkatest"
	"github.com/idemgo/idem/idemtest"
	"github.com/idemgo/idem/pgstore"
	"github.com/idemgo/idem/pgstore/pgstoretest"
	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/redisstore/redisstoretest"
	"github.com/idemgo/idem/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// idemkafka's batch path on the real stores: two members of a group
// consume 16 partitions whose records are a third duplicates, most of them
// on another partition than their original, so that batches claim keys
// that other batches hold. Every key has one effect.
func TestBatchPathOnStores(t *testing.T) {
	for _, s := range []struct {
		name string
		open func(t *testing.T) storage.Store
	}{
		{"redis", func(t *testing.T) storage.Store {
			c := redis.NewClient(&redis.Options{Addr: redisServer.Addr()})
			t.Cleanup(func() { c.Close() })
			if err := c.Ping(context.Background()).Err(); err != nil {
				redisServer.Unreachable(t, redisServer.Addr(), err)
			}
			return redisstoretest.Store(t, c, redisstore.Config{}) // its keys deleted when the test ends
		}},
		{"postgres", func(t *testing.T) storage.Store {
			return pgstoretest.Store(t, pgstoretest.Pool(t, 8), pgstore.Config{})
		}},
	} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			store := s.open(t)
			c := kafkatest.NewCluster(t, map[string]int32{"orders": partitions})
			topic := c.Name("orders")
			const orders = 900
			var recs []*kgo.Record
			keys := make([]string, orders)
			for i := range orders {
				keys[i] = fmt.Sprintf("order-%04d", i)
				recs = append(recs, kafkatest.Keyed(topic, int32(i%partitions), keys[i], keys[i]))
				if i%3 == 0 {
					recs = append(recs, kafkatest.Keyed(topic, int32((i+5)%partitions), keys[i], keys[i]))
				}
			}
			kafkatest.Produce(t, c.ListenAddrs(), recs...)

			var mu sync.Mutex
			effects := map[string]int{}
			var finished atomic.Int64
			handler := func(_ context.Context, r *kgo.Record) error {
				mu.Lock()
				effects[kafkatest.HeaderKey(r)]++
				mu.Unlock()
				return nil
			}
			ns := "kafka-" + random()
			for range 2 {
				// 5 s, not the default 30: when the second member joins, a batch
				// claim can be lost to the rebalance (PostgreSQL, about 1 run in
				// 10 under load) and its keys wait out the lease.
				g := idemtest.Guard(t, store, idem.Config{Namespace: ns, Lease: 5 * time.Second})
				cons, err := idemkafka.New(g, handler, idemkafka.WithSharedScope(), idemkafka.WithDiscardPoison(), idemkafka.WithMaxBatch(50),
					idemkafka.WithObserver(func(_ context.Context, e idemkafka.Event) {
						if e.Kind == idemkafka.EventBatch {
							finished.Add(int64(e.Records))
						}
					}))
				if err != nil {
					t.Fatal(err)
				}
				cl, err := kgo.NewClient(append(kafkatest.ClientOpts(c.ListenAddrs(), c.Name("payments"), topic), cons.ClientOpts()...)...)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- cons.Run(ctx, cl) }()
				t.Cleanup(func() {
					cancel()
					if err := <-done; err != nil {
						t.Errorf("Run: %v", err)
					}
					cl.Close()
				})
			}
			kafkatest.Await(t, kafkatest.GroupTimeout, "every record to be finished", func() bool { return finished.Load() >= int64(len(recs)) })
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				if effects[k] != 1 {
					t.Errorf("%s: %d effects, want 1", k, effects[k])
				}
			}
		})
	}
}
